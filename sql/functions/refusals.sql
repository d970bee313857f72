-- Which operator actions apply to effects as they are now: the one
-- definition the operator functions refuse by and the console greys its
-- keys by. For each effect, the actions that do not apply, each with the
-- sentence that says why (an action not listed applies; its function may
-- still refuse on what it is given). Actions not named here (annotate,
-- escalate, reconcile) apply to every effect. Set-wise, by key, because a
-- console asks it of every effect it shows on every poll: one plan for
-- them all. reopen_duplicates applies only where an acknowledgement can
-- be undone.
create or replace function ledger.refusals(op_keys text[]) returns table (op_key text, refused jsonb)
language sql stable as $$
    select e.op_key, jsonb_strip_nulls(jsonb_build_object(
        'resolve',
        case when e.state not in ('pending', 'unknown')
             then 'only a pending or unknown effect is resolved by hand' end,
        'release',
        case when e.state <> 'held' then 'only a held effect is released' end,
        'cancel',
        case when not (e.state = 'held' or (e.state = 'pending' and e.dispatched_at is null))
             then 'only a held effect, or a pending one never dispatched, is cancelled' end,
        'compensate',
        case when e.compensates is not null
             then 'it is itself a compensation: reconcile or resolve it instead'
             -- op_compensate answers a repeated request with the compensation
             -- already made, before it asks this.
             when e.state = 'compensated'
             then 'it is compensated already: its compensation is in its detail'
             when e.state <> 'succeeded'
             then 'only a succeeded effect is compensated' end,
        'acknowledge_duplicates',
        -- By the effect's own attempts, read by their effect's index: left to
        -- itself the planner walks the pane's index of every recent repeat
        -- for each effect (OFFSET 0 keeps the test out of the scan).
        case when not exists (select 1
                                from (select * from ledger.attempts a where a.effect_id = e.id offset 0) a
                               where ledger.shown_as_duplicate(a, e.duplicates_acknowledged_at, null))
             then 'it has no repeated or flagged calls to acknowledge' end,
        'reopen_duplicates',
        case when e.duplicates_acknowledged_at is null
             then 'its repeated calls were never acknowledged: nothing to reopen' end))
      from ledger.effects e
     where e.op_key = any(refusals.op_keys)
$$;

revoke all on function ledger.refusals(text[]) from public;
grant execute on function ledger.refusals(text[]) to effect_operator, effect_readonly;
