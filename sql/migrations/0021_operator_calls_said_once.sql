-- Schema version 1 + this: an operator call says its common start and end
-- once, and a verb that undoes an acknowledgement of repeated calls.
--
-- Every operator call of the common shape (a key, the version the operator
-- saw, who and why) repeated the same start: forget what the caller set,
-- lock the effect in the writer's order and check the version, refuse what
-- ledger.refusals says does not apply; and the same end: the audit entry
-- with the effect before and after, and the state, version and entry to
-- answer with. They are ledger.operator_begin and ledger.operator_finish
-- now, and each call keeps only what it changes between the two. What each
-- one answers, refuses (message and SQLSTATE, in the same order) and
-- writes to the audit trail is as it was.
--
-- The first verb written that way: ledger.op_reopen_duplicates, the undo of
-- op_acknowledge_duplicates, for an acknowledgement made by mistake or a
-- bulk clear that reached too far. Both are announced to the consoles now.

-- The start of an operator call: the effect, locked, at the version the
-- operator saw, and `action` applies to it (ledger.refusals; an action it
-- has no rule for applies to every effect). Not SECURITY DEFINER, and no
-- login may call it: only the operator functions do, which run as the
-- owner and have forgotten their caller's settings already (the first
-- statement every SECURITY DEFINER function begins with).
--
-- refused_argument: the caller's own refusal of what it was given, raised
-- (invalid_parameter_value) after the lock and before the applicability
-- rule. op_resolve has always checked its outcome there: a missing key or a
-- stale version is the first answer, whatever else is wrong, and the rule
-- is never asked for an outcome it would not write.
create function ledger.operator_begin(
    action text, op_key text, expected_version bigint, operator text, reason text,
    refused_argument text default null
) returns ledger.effects
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    effect ledger.effects;
begin
    effect := ledger.lock_for_operator(operator_begin.op_key, operator_begin.expected_version,
                                       operator_begin.operator, operator_begin.reason, true);
    if operator_begin.refused_argument is not null then
        raise exception '%', operator_begin.refused_argument using errcode = 'invalid_parameter_value';
    end if;
    perform ledger.require_applicable(effect, operator_begin.action);
    return effect;
end
$$;

-- The end of an operator call: its audit entry, with the effect as it was
-- locked and as the call left it, and what the call answers. An effect the
-- call did not change (the same version: every change moves it) has no
-- after in the entry, as a note on the record never had.
create function ledger.operator_finish(
    action text, before ledger.effects, after ledger.effects, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    audit_seq := ledger.audit(operator_finish.operator, operator_finish.action, operator_finish.after,
                              operator_finish.reason, ledger.effect_snapshot(operator_finish.before),
                              case when (operator_finish.after).version
                                        is distinct from (operator_finish.before).version
                                   then ledger.effect_snapshot(operator_finish.after) end);
    state := (operator_finish.after).state;
    version := (operator_finish.after).version;
    return next;
end
$$;

-- Which operator actions apply to effects as they are now: the one
-- definition the operator functions refuse by and the console greys its
-- keys by. For each effect, the actions that do not apply, each with the
-- sentence that says why (an action not listed applies; its function may
-- still refuse on what it is given). Actions not named here (annotate,
-- escalate, reconcile) apply to every effect. Set-wise, by key, because a
-- console asks it of every effect it shows on every poll: one plan for
-- them all. As in 0008, with reopen_duplicates: only an acknowledgement
-- can be undone.
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

-- As in 0002, with one more change that alters a pane: acknowledging a
-- key's repeats (or reopening them) takes it off (or puts it back on) the
-- duplicates pane while the effect is still pending within its window, so
-- it is announced too; until now other consoles saw it at their next poll.
create or replace function ledger.changes_no_pane(operation text, old ledger.effects, new ledger.effects)
returns boolean
language sql stable as $$
    select case when operation = 'INSERT' then (new).state = 'pending'
                else (old).state = 'pending'
                     and (new).state in ('pending', 'succeeded', 'failed')
                     and ((old).deadline_at is null or (old).deadline_at >= now())
                     and (new).attention is not distinct from (old).attention
                     and (new).late_result_at is not distinct from (old).late_result_at
                     and (new).duplicates_acknowledged_at
                         is not distinct from (old).duplicates_acknowledged_at end
$$;

-- Resolve by hand, with evidence: succeeded needs the provider's reference.
create or replace function ledger.op_resolve(
    op_key text, expected_version bigint, operator text, reason text,
    outcome text, external_ref text default null, retryable boolean default false
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before ledger.effects;
    after  ledger.effects;
begin
    perform ledger.forget_caller_settings();
    before := ledger.operator_begin('resolve', op_resolve.op_key, op_resolve.expected_version,
                                    op_resolve.operator, op_resolve.reason,
                                    refused_argument => case
        when op_resolve.outcome not in ('succeeded', 'failed') or op_resolve.outcome is null
        then 'ledger: resolve outcome must be succeeded or failed'
        when op_resolve.outcome = 'succeeded' and coalesce(btrim(op_resolve.external_ref), '') = ''
        then format('ledger: resolving %s as succeeded needs the provider''s external reference',
                    op_resolve.op_key) end);
    update ledger.effects e
       set state = op_resolve.outcome,
           external_ref = coalesce(op_resolve.external_ref, e.external_ref),
           retryable = case when op_resolve.outcome = 'failed' then coalesce(op_resolve.retryable, false) end,
           failure_reason = case when op_resolve.outcome = 'failed' then op_resolve.reason end,
           attention = null
     where e.id = before.id
    returning e.* into after;
    return query select * from ledger.operator_finish('resolve', before, after,
                                                      op_resolve.operator, op_resolve.reason);
end
$$;

create or replace function ledger.op_release(
    op_key text, expected_version bigint, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before ledger.effects;
    after  ledger.effects;
begin
    perform ledger.forget_caller_settings();
    before := ledger.operator_begin('release', op_release.op_key, op_release.expected_version,
                                    op_release.operator, op_release.reason);
    begin
        update ledger.effects e
           set state = 'pending', held_by = null, deadline_at = now() + e.pending_window
         where e.id = before.id
        returning e.* into after;
    exception when exclusion_violation then
        raise exception 'ledger: % still overlaps a booking that is open or done: cancel it, or settle the other first',
            before.op_key using errcode = 'EW422';
    end;
    update ledger.holds h set closed_at = now(), closed_how = 'released', closed_by = op_release.operator
     where h.effect_id = after.id and h.closed_at is null;
    return query select * from ledger.operator_finish('release', before, after,
                                                      op_release.operator, op_release.reason);
end
$$;

create or replace function ledger.op_cancel(
    op_key text, expected_version bigint, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before ledger.effects;
    after  ledger.effects;
begin
    perform ledger.forget_caller_settings();
    before := ledger.operator_begin('cancel', op_cancel.op_key, op_cancel.expected_version,
                                    op_cancel.operator, op_cancel.reason);
    update ledger.effects e set state = 'cancelled' where e.id = before.id
    returning e.* into after;
    update ledger.holds h set closed_at = now(), closed_how = 'cancelled', closed_by = op_cancel.operator
     where h.effect_id = after.id and h.closed_at is null;
    return query select * from ledger.operator_finish('cancel', before, after,
                                                      op_cancel.operator, op_cancel.reason);
end
$$;

-- A note on the record; changes no state, so the version check is only a
-- guard against annotating something other than what the operator saw.
-- The effect is both before and after: its entry has no after.
create or replace function ledger.op_annotate(
    op_key text, expected_version bigint, operator text, note text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.operator_begin('annotate', op_annotate.op_key, op_annotate.expected_version,
                                    op_annotate.operator, op_annotate.note);
    return query select * from ledger.operator_finish('annotate', effect, effect,
                                                      op_annotate.operator, op_annotate.note);
end
$$;

-- An operator has looked at a key's repeated and flagged calls and settled
-- what they mean: they leave the duplicates pane (which keeps flagged ones
-- for good otherwise) and stay in the attempts, the history and reports.
-- Only a key the pane lists can be acknowledged; later calls show again.
create or replace function ledger.op_acknowledge_duplicates(
    op_key text, expected_version bigint, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before ledger.effects;
    after  ledger.effects;
begin
    perform ledger.forget_caller_settings();
    before := ledger.operator_begin('acknowledge_duplicates', op_acknowledge_duplicates.op_key,
                                    op_acknowledge_duplicates.expected_version,
                                    op_acknowledge_duplicates.operator,
                                    op_acknowledge_duplicates.reason);
    update ledger.effects e set duplicates_acknowledged_at = now()
     where e.id = before.id
    returning e.* into after;
    return query select * from ledger.operator_finish('acknowledge_duplicates', before, after,
                                                      op_acknowledge_duplicates.operator,
                                                      op_acknowledge_duplicates.reason);
end
$$;

-- The undo of an acknowledgement: the key's repeated and flagged calls show
-- on the duplicates pane again, as they did before it (the last day's
-- repeats, and every flagged one). Only an acknowledged key can be
-- reopened. Its history keeps both the acknowledgement and this.
create function ledger.op_reopen_duplicates(
    op_key text, expected_version bigint, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before ledger.effects;
    after  ledger.effects;
begin
    perform ledger.forget_caller_settings();
    before := ledger.operator_begin('reopen_duplicates', op_reopen_duplicates.op_key,
                                    op_reopen_duplicates.expected_version,
                                    op_reopen_duplicates.operator,
                                    op_reopen_duplicates.reason);
    update ledger.effects e set duplicates_acknowledged_at = null
     where e.id = before.id
    returning e.* into after;
    return query select * from ledger.operator_finish('reopen_duplicates', before, after,
                                                      op_reopen_duplicates.operator,
                                                      op_reopen_duplicates.reason);
end
$$;

-- The grants (sql/0017_roles.sql): PostgreSQL lets PUBLIC execute a new
-- function, the ledger grants them one by one. The two halves are the
-- owner's, as the helpers they call are; the new verb is an operator's by
-- its name. A function replaced keeps its grants.
revoke execute on function
    ledger.operator_begin(text, text, bigint, text, text, text),
    ledger.operator_finish(text, ledger.effects, ledger.effects, text, text),
    ledger.op_reopen_duplicates(text, bigint, text, text)
    from public;
select ledger.grant_operator_actions();
