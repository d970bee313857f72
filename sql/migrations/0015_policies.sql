-- Action policies, changed only through ledger.op_set_policy: one call, one
-- transaction, one audit entry with the policy before and after. A policy
-- decides what the writer and the reconciler may do next (retry semantics,
-- windows, holds, the approval limit), so a change to it is as much an
-- operator action as settling an effect.

create function ledger.policy_snapshot(policy ledger.action_policies) returns jsonb
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
        'on_holder_success', (policy).on_holder_success)) end
$$;

-- Writes the given settings of one action's policy (creating it with the
-- defaults first if it has none); a null argument keeps what is there, and
-- clear_* removes the approval limit or the sink.
create function ledger.op_set_policy(
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
    on_holder_success                 text     default null
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
    -- As begin_effect names actions.
    op_set_policy.action := lower(btrim(op_set_policy.action));
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
           updated_at = now()
     where p.action = op_set_policy.action
    returning p.* into after;
    seq := ledger.audit(op_set_policy.operator, 'set_policy', null::ledger.effects, op_set_policy.reason,
                        ledger.policy_snapshot(before), ledger.policy_snapshot(after));
    return query select ledger.policy_snapshot(after), seq;
end
$$;

-- Ledger-wide settings, one row: whether an action nobody wrote a policy
-- for is refused at begin_effect ('refuse') or runs under the defaults
-- ('allow', as a new ledger does). Changed only by op_set_unknown_actions,
-- audited.
create table ledger.ledger_settings (
    only_row        boolean primary key default true check (only_row),
    unknown_actions text not null default 'allow' check (unknown_actions in ('allow', 'refuse')),
    updated_at      timestamptz not null default now()
);
insert into ledger.ledger_settings default values;

create function ledger.op_set_unknown_actions(mode text, operator text, reason text)
returns table (unknown_actions text, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before text;
    seq    bigint;
begin
    perform ledger.forget_caller_settings();
    perform ledger.require_who_and_why(op_set_unknown_actions.operator, op_set_unknown_actions.reason,
                                       'to change how unknown actions are treated');
    if op_set_unknown_actions.mode is null or op_set_unknown_actions.mode not in ('allow', 'refuse') then
        raise exception 'ledger: unknown actions are allowed or refused, not %', op_set_unknown_actions.mode
            using errcode = 'invalid_parameter_value';
    end if;
    perform set_config('ledger.actor', op_set_unknown_actions.operator, true);
    perform set_config('ledger.reason', op_set_unknown_actions.reason, true);
    select s.unknown_actions into before from ledger.ledger_settings s for update;
    update ledger.ledger_settings s
       set unknown_actions = op_set_unknown_actions.mode, updated_at = now();
    seq := ledger.audit(op_set_unknown_actions.operator, 'set_unknown_actions', null::ledger.effects,
                        op_set_unknown_actions.reason, jsonb_build_object('unknown_actions', before),
                        jsonb_build_object('unknown_actions', op_set_unknown_actions.mode));
    return query select op_set_unknown_actions.mode, seq;
end
$$;

-- Actions effects were begun with in the last 30 days that have no policy
-- of their own, on a ledger whose operators write policies (one besides the
-- ledger's own compensate): `effectwatch check` warns about them, since
-- each runs under the defaults and may be a misspelling of one that does
-- not. A ledger with no policy at all runs on the defaults by choice.
create view ledger.actions_without_policy as
select e.action, count(*) as effects, max(e.created_at) as last_used
  from ledger.effects e
 where e.created_at > now() - interval '30 days'
   and not exists (select 1 from ledger.action_policies p where p.action = e.action)
   and exists (select 1 from ledger.action_policies p where p.action <> 'compensate')
 group by e.action;
