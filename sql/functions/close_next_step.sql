-- Closes the open step of that kind on an effect: the step was taken (or
-- is no longer owed) in the caller's transaction.
create or replace function ledger.close_next_step(effect_id bigint, step text, done_by text, outcome text)
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    update ledger.next_steps s
       set done_at = now(), done_by = close_next_step.done_by, outcome = close_next_step.outcome,
           claimed_by = null, claimed_until = null
     where s.effect_id = close_next_step.effect_id and s.step = close_next_step.step
       and s.done_at is null
$$;

revoke all on function ledger.close_next_step(bigint,text,text,text) from public;
