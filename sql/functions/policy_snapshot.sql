create or replace function ledger.policy_snapshot(policy ledger.action_policies) returns jsonb
language sql immutable as $$
    select case when policy is null then null else jsonb_strip_nulls(jsonb_build_object(
        'action', (policy).action,
        'pending_window', (policy).pending_window::text,
        'exclusive_per_target', (policy).exclusive_per_target,
        'compensation_approval_limit_minor', (policy).compensation_approval_limit_minor,
        'retry_when_absent', (policy).retry_when_absent,
        'retry_semantics', (policy).retry_semantics,
        'escalation_sink', (policy).escalation_sink,
        'approvals_must_be_registered', (policy).approvals_must_be_registered,
        'conflicts_by_time_range', (policy).conflicts_by_time_range,
        'on_holder_success', (policy).on_holder_success,
        'replay_burst_per_hour', (policy).replay_burst_per_hour,
        'heartbeat_lease', (policy).heartbeat_lease::text)) end
$$;

revoke all on function ledger.policy_snapshot(ledger.action_policies) from public;
grant execute on function ledger.policy_snapshot(ledger.action_policies) to effect_operator, effect_readonly;
