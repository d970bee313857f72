-- Filled from the effect being pruned (retention inserts the tombstone
-- before it deletes the row), whichever function writes it.
create or replace function ledger.tombstone_keeps_its_owner() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if new.owner_role is null then
        select e.owner_role, e.requested_by into new.owner_role, new.requested_by
          from ledger.effects e where e.id = new.effect_id;
    end if;
    return new;
end
$$;

revoke all on function ledger.tombstone_keeps_its_owner() from public;
