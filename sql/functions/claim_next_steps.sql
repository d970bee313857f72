-- Claims up to `batch` due steps no live claim holds, for `lease`, but
-- those in `taken` (what this pass already took up: a step left open with a
-- short backoff waits for the next pass). A killed reconciler's claims
-- expire and the steps are due again.
create or replace function ledger.claim_next_steps(reconciler text, lease interval, batch integer,
                                        taken bigint[] default '{}')
returns table (step_id bigint, op_key text, step text, why text, tries integer,
               escalation_sink text, original_key text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    perform ledger.forget_caller_settings();
    if coalesce(btrim(claim_next_steps.reconciler), '') = '' then
        raise exception 'ledger: a reconciler name is required' using errcode = 'invalid_parameter_value';
    end if;
    if claim_next_steps.lease is null or claim_next_steps.lease <= interval '0'
       or claim_next_steps.batch is null or claim_next_steps.batch < 1 then
        raise exception 'ledger: a lease must be positive and a batch at least 1'
            using errcode = 'invalid_parameter_value';
    end if;
    return query
    with due as (
        select s.id from ledger.next_steps s
         where s.done_at is null and s.due_at <= now()
           and (s.claimed_until is null or s.claimed_until < now())
           and s.id <> all (coalesce(claim_next_steps.taken, '{}'))
         order by s.due_at, s.id
         limit claim_next_steps.batch
           for update skip locked
    ), claimed as (
        update ledger.next_steps s
           set claimed_by = claim_next_steps.reconciler, claimed_until = now() + claim_next_steps.lease
          from due where s.id = due.id
        returning s.id, s.effect_id, s.step, s.why, s.tries
    )
    -- A compensation's sink is its original action's.
    select c.id, e.op_key, c.step, c.why, c.tries, p.escalation_sink, o.op_key
      from claimed c
      join ledger.effects e on e.id = c.effect_id
      left join ledger.effects o on o.id = e.compensates
     cross join lateral ledger.policy_for(coalesce(o.action, e.action)) p
     order by c.id;
end
$$;

revoke all on function ledger.claim_next_steps(text,interval,integer,bigint[]) from public;
grant execute on function ledger.claim_next_steps(text,interval,integer,bigint[]) to effect_operator;
