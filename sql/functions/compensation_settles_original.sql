-- However a compensation becomes succeeded, the original becomes
-- compensated in the same transaction, with an audit entry of its own.
create or replace function ledger.compensation_settles_original() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    original     ledger.effects;
    before       jsonb;
    saved_reason text;
    why          text;
begin
    -- Only a compensation's success settles its original (the trigger's
    -- WHEN leaves out every effect that is not a compensation).
    if new.state <> 'succeeded' or old.state is not distinct from 'succeeded' then
        return null;
    end if;
    -- The reversal of a duplicate record leaves the effect itself standing;
    -- once every extra record a reconciliation listed is reversed, the
    -- effect is no longer held twice, and its flag goes (audited).
    if not ledger.reverses_the_effect(new.params) then
        select e.* into original from ledger.effects e where e.id = new.compensates for update;
        if original.attention = 'duplicate' and not exists (
               select 1 from ledger.reconciliations r cross join lateral unnest(r.external_refs) listed(ref)
                where r.effect_id = original.id and r.finding = 'duplicate'
                  and listed.ref is distinct from original.external_ref
                  and not exists (select 1 from ledger.effects c
                                   where c.compensates = original.id and c.state = 'succeeded'
                                     and c.params ->> 'reverses_duplicate' = listed.ref)) then
            why := 'every duplicate record at the provider is reversed (last by ' || new.op_key || ')';
            saved_reason := current_setting('ledger.reason', true);
            perform set_config('ledger.reason', why, true);
            before := ledger.effect_snapshot(original);
            update ledger.effects e set attention = null where e.id = original.id
            returning e.* into original;
            perform ledger.close_next_step(original.id, 'reverse_duplicates', ledger.current_actor(), why);
            perform ledger.audit(ledger.current_actor(), 'duplicates_reversed', original, why, before,
                                 ledger.effect_snapshot(original));
            perform set_config('ledger.reason', coalesce(saved_reason, ''), true);
        end if;
        return null;
    end if;
    select e.* into original from ledger.effects e where e.id = new.compensates for update;
    if not found or original.state <> 'succeeded' then
        -- Already compensated another way, or never succeeded: nothing to reverse in the ledger.
        return null;
    end if;
    why := 'compensated by ' || new.op_key;
    saved_reason := current_setting('ledger.reason', true);
    perform set_config('ledger.reason', why, true);
    before := ledger.effect_snapshot(original);
    update ledger.effects e set state = 'compensated' where e.id = original.id
    returning e.* into original;
    perform ledger.audit(ledger.current_actor(), 'compensated', original, why, before,
                         ledger.effect_snapshot(original) || jsonb_build_object('compensation_key', new.op_key));
    perform set_config('ledger.reason', coalesce(saved_reason, ''), true);
    return null;
end
$$;

revoke all on function ledger.compensation_settles_original() from public;
