-- Ends a lease after a pass over the effect. An effect the pass settled
-- leaves the reconciler's books; one still open is asked again after
-- `backoff` doubled per try, at most `backoff_max`. Returns the tries so
-- far and whether a person was already asked. A lease that expired and
-- passed to another reconciler is not this one's to end: nothing changes.
create or replace function ledger.end_reconcile_lease(
    op_key text, reconciler text, finding text, backoff interval, backoff_max interval
) returns table (tries integer, escalated boolean, settled boolean)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
    lease  ledger.reconcile_leases;
begin
    perform ledger.forget_caller_settings();
    select e.* into effect from ledger.effects e where e.op_key = end_reconcile_lease.op_key;
    if not found then
        raise exception 'ledger: no effect with key %', end_reconcile_lease.op_key using errcode = 'EW404';
    end if;
    select l.* into lease from ledger.reconcile_leases l
     where l.effect_id = effect.id for update;
    if not found or lease.claimed_by is distinct from end_reconcile_lease.reconciler then
        return query select coalesce(lease.tries, 0), lease.escalated_at is not null, false;
        return;
    end if;
    if effect.state not in ('pending', 'unknown') then
        -- Off the books until the effect opens again (a safe retry): the
        -- version it was seen settled at keeps stale readings from leasing it.
        update ledger.reconcile_leases l
           set claimed_by = null, claimed_until = null, tries = 0, escalated_at = null,
               last_finding = end_reconcile_lease.finding, last_try_at = now(),
               settled_version = effect.version
         where l.effect_id = effect.id;
        return query select lease.tries + 1, lease.escalated_at is not null, true;
        return;
    end if;
    update ledger.reconcile_leases l
       set claimed_by = null, claimed_until = null, tries = l.tries + 1,
           last_finding = end_reconcile_lease.finding, last_try_at = now(),
           next_try_at = now() + least(
               coalesce(end_reconcile_lease.backoff_max, interval '1 hour'),
               coalesce(end_reconcile_lease.backoff, interval '30 seconds') * power(2, least(l.tries, 20)))
     where l.effect_id = effect.id
    returning l.* into lease;
    return query select lease.tries, lease.escalated_at is not null, false;
end
$$;

revoke all on function ledger.end_reconcile_lease(text,text,text,interval,interval) from public;
grant execute on function ledger.end_reconcile_lease(text,text,text,interval,interval) to effect_operator;
