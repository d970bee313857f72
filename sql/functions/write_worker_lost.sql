-- Writes the loss of one locked effect's worker, if its lease has run out:
-- the effect turns unknown (worker_lost), kept in its history and audited
-- as the ledger's own finding. Returns the effect as it then is.
create or replace function ledger.write_worker_lost(effect ledger.effects) returns ledger.effects
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    lease  ledger.worker_leases;
    after  ledger.effects;
    reason text;
begin
    if effect.state <> 'pending' or effect.dispatched_at is null then
        return effect;
    end if;
    select w.* into lease from ledger.worker_leases w
     where w.effect_id = effect.id and w.lease_until < now();
    if not found then
        return effect;
    end if;
    reason := ledger.worker_lost_reason(lease);
    perform set_config('ledger.actor', 'ledger', true);
    perform set_config('ledger.reason', reason, true);
    update ledger.effects e
       set state = 'unknown', error_class = 'worker_lost', failure_reason = reason
     where e.id = effect.id
    returning e.* into after;
    perform ledger.audit('ledger', 'worker_lost', after, reason,
                         ledger.effect_snapshot(effect), ledger.effect_snapshot(after));
    return after;
end
$$;

revoke all on function ledger.write_worker_lost(ledger.effects) from public;
