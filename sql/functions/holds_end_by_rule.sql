-- Holds end by rule. When a holder settles, what it held is decided again
-- in the same transaction, whoever settled it (its agent, a
-- reconciliation, an operator, a compensation):
--   failed or cancelled: the oldest effect it held is released (pending,
--     and the held call, asked again, proceeds); the others now wait behind
--     the released one. Under a policy that conflicts by time range, every
--     held booking that overlaps no open one is released together, oldest
--     first, and each left waits behind the oldest open booking it overlaps;

--   succeeded: they wait for a person (a second action on one object is a
--     real decision), unless the action's policy says on_holder_success =
--     'cancel', which cancels them;
--   unknown: nothing; the holder is still open.
-- A holder may itself be held (a key asked while the only open effect on
-- its target was held waits behind that one): cancelled, it releases too.
-- Each change is audited as the ledger's, with the holder and its state as
-- the reason. A release a booking's overlap forbids is left to a person.
create or replace function ledger.holds_end_by_rule() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    held         ledger.effects;
    next_holder  ledger.effects;
    before       jsonb;
    why          text;
    saved_actor  text;
    saved_reason text;
begin
    if not exists (select 1 from ledger.effects h where h.held_by = new.id and h.state = 'held') then
        return null;
    end if;
    if new.state = 'succeeded'
       and (ledger.policy_for(new.action)).on_holder_success is distinct from 'cancel' then
        return null;
    end if;
    saved_actor := current_setting('ledger.actor', true);
    saved_reason := current_setting('ledger.reason', true);
    perform set_config('ledger.actor', 'ledger', true);
    if new.state = 'succeeded' then
        why := 'cancelled by rule: ' || new.op_key || ', which held it, succeeded, and the '
               || new.action || ' policy cancels what it held';
        perform set_config('ledger.reason', why, true);
        for held in select h.* from ledger.effects h
                     where h.held_by = new.id and h.state = 'held'
                     order by h.created_at, h.id for update
        loop
            before := ledger.effect_snapshot(held);
            update ledger.effects e set state = 'cancelled' where e.id = held.id returning e.* into held;
            update ledger.holds h set closed_at = now(), closed_how = 'cancelled', closed_by = 'ledger'
             where h.effect_id = held.id and h.closed_at is null;
            perform ledger.audit('ledger', 'cancel_by_rule', held, why, before, ledger.effect_snapshot(held));
        end loop;
    elsif (ledger.policy_for(new.action)).conflicts_by_time_range then
        why := 'released by rule: ' || new.op_key || ', which held it, ' || new.state;
        for held in select h.* from ledger.effects h
                     where h.held_by = new.id and h.state = 'held'
                     order by h.created_at, h.id for update
        loop
            -- One that overlaps a booking released before it, or another
            -- open one, stays held.
            perform ledger.release_held_by_rule(held, why);
        end loop;
        for held in select h.* from ledger.effects h
                     where h.held_by = new.id and h.state = 'held'
                     order by h.created_at, h.id
        loop
            select o.* into next_holder from ledger.effects o
             where o.target = held.target and o.action = held.action and o.id <> held.id
               and o.state in ('pending', 'unknown') and o.during && held.during
             order by o.created_at, o.id
             limit 1;
            -- Only a settled booking is in the way: a person decides.
            continue when not found;
            perform set_config('ledger.reason', 'now held by ' || next_holder.op_key || ': ' || why, true);
            update ledger.effects e set held_by = next_holder.id where e.id = held.id;
            update ledger.holds h set holder_id = next_holder.id
             where h.effect_id = held.id and h.closed_at is null;
        end loop;
    else
        select h.* into held from ledger.effects h
         where h.held_by = new.id and h.state = 'held'
         order by h.created_at, h.id limit 1 for update;
        why := 'released by rule: ' || new.op_key || ', which held it, ' || new.state;
        if not ledger.release_held_by_rule(held, why) then
            -- Still overlaps another booking: a person decides.
            perform set_config('ledger.actor', coalesce(saved_actor, ''), true);
            perform set_config('ledger.reason', coalesce(saved_reason, ''), true);
            return null;
        end if;
        -- The rest wait behind the one released, and are released in turn.
        perform set_config('ledger.reason', 'now held by ' || held.op_key || ': ' || why, true);
        update ledger.effects e set held_by = held.id
         where e.held_by = new.id and e.state = 'held';
        update ledger.holds h set holder_id = held.id
         where h.holder_id = new.id and h.closed_at is null;
    end if;
    perform set_config('ledger.actor', coalesce(saved_actor, ''), true);
    perform set_config('ledger.reason', coalesce(saved_reason, ''), true);
    return null;
end
$$;

revoke all on function ledger.holds_end_by_rule() from public;
