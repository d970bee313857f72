-- A hold sees its holder settle (issue: holds without a race).
--
-- begin_effect decides a new effect is held behind the open effect on its
-- target under the target's lock; complete_effect settles that holder
-- under the holder's row lock alone. When the two ran at once, the hold's
-- insert had not committed when the holder's failure ran its rule
-- (holds_end_by_rule, 0008), and the rule, not seeing it, released
-- nothing: the effect stayed held behind a failed one, waiting for a person
-- for nothing. Now a held row's insert takes a share lock on its holder
-- first. A holder whose outcome is being written is waited for, and seen
-- as it ends: settled, the effect is held behind the next open one, or
-- not held at all. A holder locked first cannot be settled until the hold
-- commits, and its rule then sees the hold and releases it. Lock order:
-- the target (begin_effect), then the holder's row; complete_effect takes
-- no target lock, so the two cannot deadlock.

create function ledger.held_behind_an_open_effect() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    holder_state text;
    by_range boolean;
begin
    if new.held_by is null or new.state <> 'held' then
        return new;
    end if;
    select h.state into holder_state from ledger.effects h where h.id = new.held_by for share;
    if holder_state in ('pending', 'unknown', 'held') then
        return new;
    end if;
    -- Settled while this one was deciding: what begin_effect would have
    -- chosen had it seen that.
    by_range := (ledger.policy_for(new.action)).conflicts_by_time_range;
    new.held_by := null;
    select h.id into new.held_by from ledger.effects h
     where h.target = new.target and h.action = new.action
       and h.state in ('pending', 'unknown', 'held')
       and (not by_range or h.during && new.during)
     order by (h.state = 'held'), h.created_at
     limit 1
     for share;
    if new.held_by is null then
        new.state := 'pending';
    end if;
    return new;
end
$$;

-- Named to fire before effects_guard (BEFORE triggers fire by name), so
-- the guard checks the row as it will be.
create trigger effects_a_held_behind_an_open_effect
    before insert on ledger.effects
    for each row when (new.held_by is not null)
    execute function ledger.held_behind_an_open_effect();
alter table ledger.effects enable always trigger effects_a_held_behind_an_open_effect;

revoke execute on function ledger.held_behind_an_open_effect() from public;
