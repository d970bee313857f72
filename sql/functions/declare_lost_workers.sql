-- Writes every loss whose lease has run out: the reconciler's pass calls
-- it first, so what it takes up next includes them. Returns their keys.
create or replace function ledger.declare_lost_workers(batch integer default 1000)
returns table (op_key text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
begin
    perform ledger.forget_caller_settings();
    for effect in
        select e.* from ledger.worker_leases w
          join ledger.effects e on e.id = w.effect_id
         where w.lease_until < now() and e.state = 'pending' and e.dispatched_at is not null
         order by w.lease_until
         limit greatest(coalesce(declare_lost_workers.batch, 1000), 1)
           for update of e skip locked
    loop
        effect := ledger.write_worker_lost(effect);
        if effect.state = 'unknown' then
            op_key := effect.op_key;
            return next;
        end if;
    end loop;
end
$$;

revoke all on function ledger.declare_lost_workers(integer) from public;
grant execute on function ledger.declare_lost_workers(integer) to effect_operator;
