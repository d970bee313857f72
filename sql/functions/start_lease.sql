-- Starts (or, for an effect dispatched again, starts anew) the lease of a
-- claimed effect; its caller checked the lease before claiming.
create or replace function ledger.start_lease(effect_id bigint, worker text, lease interval) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    insert into ledger.worker_leases as w (effect_id, worker, lease, lease_until)
    values (start_lease.effect_id, start_lease.worker, start_lease.lease, now() + start_lease.lease)
    on conflict on constraint worker_leases_pkey do update
       set worker = excluded.worker, lease = excluded.lease, lease_until = excluded.lease_until,
           beats = 1, first_beat_at = now();
end
$$;

revoke all on function ledger.start_lease(bigint,text,interval) from public;
