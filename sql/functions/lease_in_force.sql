-- The heartbeat lease a worker that asked for `asked` is held to on an
-- effect of `action`: its action's policy's lease when the policy sets one,
-- else its own. A caller that asked for none takes none: a policy's lease
-- never turns the effects of a worker that does not beat into losses.
create or replace function ledger.lease_in_force(action text, asked interval) returns interval
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select case when asked is null then null
                else coalesce((select p.heartbeat_lease from ledger.action_policies p
                                where p.action = lease_in_force.action), asked) end
$$;

revoke all on function ledger.lease_in_force(text,interval) from public;
