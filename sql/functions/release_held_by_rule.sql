-- One held effect released by the ledger's rule (ledger.holds_end_by_rule):
-- pending again with a fresh window, its hold closed, audited as the
-- ledger's with why. False, and nothing changed, when its time range still
-- overlaps a booking the exclusion constraint protects: it stays held.
create or replace function ledger.release_held_by_rule(held ledger.effects, why text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    before   jsonb := ledger.effect_snapshot(held);
    released ledger.effects;
begin
    perform set_config('ledger.reason', why, true);
    begin
        update ledger.effects e
           set state = 'pending', held_by = null, deadline_at = now() + e.pending_window
         where e.id = held.id
        returning e.* into released;
    exception when exclusion_violation then
        return false;
    end;
    update ledger.holds h set closed_at = now(), closed_how = 'released', closed_by = 'ledger'
     where h.effect_id = held.id and h.closed_at is null;
    perform ledger.audit('ledger', 'release_by_rule', released, why, before,
                         ledger.effect_snapshot(released));
    return true;
end
$$;

revoke all on function ledger.release_held_by_rule(ledger.effects, text) from public;
