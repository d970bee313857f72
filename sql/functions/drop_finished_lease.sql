-- A lease is done with once its effect is settled: dropped then, unless the
-- lease's end is what settled it (kept, so the views at any instant between
-- the lease's end and the write still say so).
create or replace function ledger.drop_finished_lease() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if new.error_class is distinct from 'worker_lost' then
        delete from ledger.worker_leases w where w.effect_id = new.id;
    end if;
    return null;
end
$$;

revoke all on function ledger.drop_finished_lease() from public;
