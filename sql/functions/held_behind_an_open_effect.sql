create or replace function ledger.held_behind_an_open_effect() returns trigger
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

revoke all on function ledger.held_behind_an_open_effect() from public;
