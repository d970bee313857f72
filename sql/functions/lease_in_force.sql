-- The heartbeat lease a worker that asked for `asked` is held to on an
-- effect of `action`: its action's policy's lease when the policy sets one,
-- else its own. A caller that asked for none takes none: a policy's lease
-- never turns the effects of a worker that does not beat into losses.
-- plpgsql without a SET clause, like policy_for: every claim asks it, and a
-- sql function with one is planned again on every call (0.1 ms a claim).
-- Its names are qualified, so the caller's search_path does not matter.
create or replace function ledger.lease_in_force(action text, asked interval) returns interval
language plpgsql stable
as $$
declare
    policy_lease interval;
begin
    if asked is null then
        return null;
    end if;
    select p.heartbeat_lease into policy_lease
      from ledger.action_policies p
     where p.action = lease_in_force.action;
    return coalesce(policy_lease, asked);
end
$$;

revoke all on function ledger.lease_in_force(text,interval) from public;
