-- Writes the given settings of one action's policy (creating it with the
-- defaults first if it has none); a null argument keeps what is there, and
-- clear_* removes the approval limit, the sink or the heartbeat lease.
create or replace function ledger.op_set_policy(
    action                            text,
    operator                          text,
    reason                            text,
    pending_window                    interval default null,
    exclusive_per_target              boolean  default null,
    compensation_approval_limit_minor bigint   default null,
    clear_approval_limit              boolean  default false,
    retry_when_absent                 boolean  default null,
    retry_semantics                   text     default null,
    escalation_sink                   text     default null,
    clear_escalation_sink             boolean  default false,
    approvals_must_be_registered      boolean  default null,
    conflicts_by_time_range           boolean  default null,
    on_holder_success                 text     default null,
    replay_burst_per_hour             integer  default null,
    heartbeat_lease                   interval default null,
    clear_heartbeat_lease             boolean  default false
) returns table (policy jsonb, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before ledger.action_policies;
    after  ledger.action_policies;
    seq    bigint;
begin
    perform ledger.forget_caller_settings();
    perform ledger.require_who_and_why(op_set_policy.operator, op_set_policy.reason, 'to change a policy');
    if coalesce(btrim(op_set_policy.action), '') = '' then
        raise exception 'ledger: which action''s policy?' using errcode = 'invalid_parameter_value';
    end if;
    op_set_policy.action := ledger.action_name(op_set_policy.action);
    -- The ledger's own action: its compensations of effects on one target
    -- must not hold each other, carry no booking range and name the
    -- ledger's own approvals. Settings that would stop every compensation
    -- are refused.
    if op_set_policy.action = 'compensate'
       and (op_set_policy.exclusive_per_target or op_set_policy.conflicts_by_time_range
            or op_set_policy.approvals_must_be_registered
            or op_set_policy.on_holder_success is not distinct from 'cancel') then
        raise exception 'ledger: compensate is the ledger''s own action: it cannot be exclusive per target, '
                        'conflict by time range, require registered approvals or cancel what it holds'
            using errcode = 'EW422';
    end if;
    if op_set_policy.replay_burst_per_hour is not null and op_set_policy.replay_burst_per_hour < 1 then
        raise exception 'ledger: a replay burst is more than some number of replays an hour, at least 1, not %',
                        op_set_policy.replay_burst_per_hour
            using errcode = 'invalid_parameter_value';
    end if;
    if op_set_policy.heartbeat_lease is not null then
        perform ledger.check_lease(op_set_policy.heartbeat_lease);
    end if;
    perform set_config('ledger.actor', op_set_policy.operator, true);
    perform set_config('ledger.reason', op_set_policy.reason, true);
    select p.* into before from ledger.action_policies p where p.action = op_set_policy.action for update;
    if not found then
        before := null;
        insert into ledger.action_policies (action) values (op_set_policy.action);
    end if;
    update ledger.action_policies p
       set pending_window = coalesce(op_set_policy.pending_window, p.pending_window),
           exclusive_per_target = coalesce(op_set_policy.exclusive_per_target, p.exclusive_per_target),
           compensation_approval_limit_minor = case
               when op_set_policy.clear_approval_limit then null
               else coalesce(op_set_policy.compensation_approval_limit_minor, p.compensation_approval_limit_minor) end,
           retry_when_absent = coalesce(op_set_policy.retry_when_absent, p.retry_when_absent),
           retry_semantics = coalesce(op_set_policy.retry_semantics, p.retry_semantics),
           escalation_sink = case
               when op_set_policy.clear_escalation_sink then null
               else coalesce(nullif(btrim(op_set_policy.escalation_sink), ''), p.escalation_sink) end,
           approvals_must_be_registered = coalesce(op_set_policy.approvals_must_be_registered,
                                                   p.approvals_must_be_registered),
           conflicts_by_time_range = coalesce(op_set_policy.conflicts_by_time_range, p.conflicts_by_time_range),
           on_holder_success = coalesce(op_set_policy.on_holder_success, p.on_holder_success),
           replay_burst_per_hour = coalesce(op_set_policy.replay_burst_per_hour, p.replay_burst_per_hour),
           heartbeat_lease = case
               when op_set_policy.clear_heartbeat_lease then null
               else coalesce(op_set_policy.heartbeat_lease, p.heartbeat_lease) end,
           updated_at = now()
     where p.action = op_set_policy.action
    returning p.* into after;
    seq := ledger.audit(op_set_policy.operator, 'set_policy', null::ledger.effects, op_set_policy.reason,
                        ledger.policy_snapshot(before), ledger.policy_snapshot(after));
    return query select ledger.policy_snapshot(after), seq;
end
$$;

revoke all on function ledger.op_set_policy(text,text,text,interval,boolean,bigint,boolean,boolean,text,text,boolean,boolean,boolean,text,integer,interval,boolean) from public;
grant execute on function ledger.op_set_policy(text,text,text,interval,boolean,bigint,boolean,boolean,text,text,boolean,boolean,boolean,text,integer,interval,boolean) to effect_operator;
