-- Ends this reconciler's claim on a step. `done`: it was taken, or is no
-- longer owed (`outcome` says which). Otherwise it is due again after
-- `backoff` doubled per try, at most `backoff_max`, with `outcome` as its
-- last error. A step the taking function closed, or that another
-- reconciler claimed since, is left as it is. Returns its tries and
-- whether it is still open.
create or replace function ledger.end_next_step(
    step_id bigint, reconciler text, done boolean, outcome text, backoff interval, backoff_max interval
) returns table (tries integer, open boolean)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    owed ledger.next_steps;
begin
    perform ledger.forget_caller_settings();
    select s.* into owed from ledger.next_steps s where s.id = end_next_step.step_id for update;
    if not found then
        raise exception 'ledger: no next step %', end_next_step.step_id using errcode = 'EW404';
    end if;
    if owed.done_at is not null or owed.claimed_by is distinct from end_next_step.reconciler then
        return query select owed.tries, owed.done_at is null;
        return;
    end if;
    if end_next_step.done then
        update ledger.next_steps s
           set done_at = now(), done_by = end_next_step.reconciler, outcome = end_next_step.outcome,
               claimed_by = null, claimed_until = null
         where s.id = owed.id;
        return query select owed.tries, false;
        return;
    end if;
    update ledger.next_steps s
       set claimed_by = null, claimed_until = null, tries = s.tries + 1, last_error = end_next_step.outcome,
           due_at = now() + least(
               coalesce(end_next_step.backoff_max, interval '1 hour'),
               coalesce(end_next_step.backoff, interval '30 seconds') * power(2, least(s.tries, 20)))
     where s.id = owed.id
    returning s.* into owed;
    return query select owed.tries, true;
end
$$;

revoke all on function ledger.end_next_step(bigint,text,boolean,text,interval,interval) from public;
grant execute on function ledger.end_next_step(bigint,text,boolean,text,interval,interval) to effect_operator;
