-- plpgsql rather than sql for this and record_attempt: PostgreSQL plans a
-- sql function's body on every call, plpgsql once per session.
create or replace function ledger.policy_for(action text)
returns ledger.action_policies
language plpgsql stable as $$
declare
    policy ledger.action_policies;
begin
    select p.* into policy from ledger.action_policies p where p.action = policy_for.action;
    if not found then
        -- The table's defaults, for an action nobody wrote a policy for.
        policy.action := policy_for.action;
        policy.pending_window := interval '5 minutes';
        policy.exclusive_per_target := true;
        policy.retry_when_absent := true;
        policy.retry_semantics := 'reconcile_first';
        policy.approvals_must_be_registered := false;
        policy.conflicts_by_time_range := false;
        policy.on_holder_success := 'leave';
        policy.replay_burst_per_hour := 20;
        -- Never written: what tells the defaults from a policy of its own.
        policy.updated_at := null;
    end if;
    return policy;
end
$$;

revoke all on function ledger.policy_for(text) from public;
grant execute on function ledger.policy_for(text) to effect_operator, effect_readonly;
