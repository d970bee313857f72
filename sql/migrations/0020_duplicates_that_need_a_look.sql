-- Schema version 1 + this: the duplicates pane tells the keys a person must
-- look at from the repeats the ledger answered by itself.
--
-- A key asked again and answered with its stored result is the ledger doing
-- its job; so is a repeat told to wait, held behind another effect, told to
-- stop, or re-run under a safe-retry policy. In a busy hour those are
-- hundreds of keys, and they buried the few that need a person. A key needs
-- a look when one of its repeats in the pane:
--   * asked with other parameters (a mismatch),
--   * brought a result after the effect had settled (a late result),
--   * was refused (a writer call the ledger would not take),
--   * asked again while the first call had no answer yet (in flight: the
--     repeat that would have been a second effect without the ledger),
--   * or its replays came in a burst: more than the action's
--     replay_burst_per_hour within the hour before the instant (an agent in
--     a loop, even one the ledger contains).
-- The view keeps both kinds, each row saying which it is and why
-- (needs_look, look_reasons); the pane lists the first by default and
-- counts the second in its header, and ledger.pane_counts reports both
-- ('duplicates' and 'replays').
--
-- The limit is an action's policy, changed through op_set_policy like the
-- rest, and read as it stands now at any instant (policies keep no history).

alter table ledger.action_policies
    add column replay_burst_per_hour integer not null default 20 check (replay_burst_per_hour > 0);

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
        'replay_burst_per_hour', (policy).replay_burst_per_hour)) end
$$;

-- op_set_policy gains the burst limit as its last, defaulted parameter: a
-- caller naming its arguments (as every client does) is unchanged.
drop function ledger.op_set_policy(text, text, text, interval, boolean, bigint, boolean, boolean, text,
                                   text, boolean, boolean, boolean, text);

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
    on_holder_success                 text     default null,
    replay_burst_per_hour             integer  default null
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
    if op_set_policy.replay_burst_per_hour is not null and op_set_policy.replay_burst_per_hour < 1 then
        raise exception 'ledger: a replay burst is more than some number of replays an hour, at least 1, not %',
                        op_set_policy.replay_burst_per_hour
            using errcode = 'invalid_parameter_value';
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
           updated_at = now()
     where p.action = op_set_policy.action
    returning p.* into after;
    seq := ledger.audit(op_set_policy.operator, 'set_policy', null::ledger.effects, op_set_policy.reason,
                        ledger.policy_snapshot(before), ledger.policy_snapshot(after));
    return query select ledger.policy_snapshot(after), seq;
end
$$;

-- The pane's rows gain what tells them apart; the columns before are as
-- they were, so a reader of version 1 reads the same.
drop view ledger.pane_counts;
drop view ledger.duplicate_attempts;
drop function ledger.pane_counts_at(timestamptz);
drop function ledger.duplicate_attempts_at(timestamptz);

create function ledger.duplicate_attempts_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, state text, attempts bigint,
    replays bigint, in_flight bigint, mismatches bigint, late_results bigint,
    first_seen timestamptz, last_seen timestamptz, requesters text[], has_mismatch boolean,
    version bigint, refused bigint, replays_last_hour bigint, needs_look boolean, look_reasons text[])
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, e.state, d.attempts, d.replays, d.in_flight,
           d.mismatches, d.late_results, d.first_seen, d.last_seen, d.requesters,
           d.mismatches > 0, e.version, d.refused, d.replays_last_hour,
           cardinality(why.reasons) > 0, why.reasons
      from (select a.effect_id,
                   count(*) as attempts,
                   count(*) filter (where a.kind = 'replay') as replays,
                   count(*) filter (where a.kind = 'in_flight') as in_flight,
                   count(*) filter (where a.kind = 'mismatch') as mismatches,
                   count(*) filter (where a.kind = 'late_result') as late_results,
                   count(*) filter (where a.kind in ('refused', 'dispatch_refused')) as refused,
                   count(*) filter (where a.kind = 'replay'
                                      and a.at > ledger.instant(at_time) - interval '1 hour') as replays_last_hour,
                   min(a.at) as first_seen,
                   max(a.at) as last_seen,
                   array_agg(distinct a.requested_by) filter (where a.requested_by is not null) as requesters
              from ledger.attempts a
             where ledger.counts_as_duplicate(a.kind)
               and ledger.shown_as_duplicate(a, (select x.duplicates_acknowledged_at
                                                   from ledger.effect_at(a.effect_id, at_time) x),
                                             at_time)
             group by a.effect_id) d
     cross join lateral ledger.effect_at(d.effect_id, at_time) e
     cross join lateral (
           select array_remove(array[
                      case when d.mismatches > 0 then 'mismatch' end,
                      case when d.late_results > 0 then 'late result' end,
                      case when d.refused > 0 then 'refused call' end,
                      case when d.in_flight > 0 then 'repeat in flight' end,
                      case when d.replays_last_hour > (ledger.policy_for(e.action)).replay_burst_per_hour
                           then 'replay burst' end], null) as reasons) why
$$;

create view ledger.duplicate_attempts as select * from ledger.duplicate_attempts_at(null);

-- As in version 1, with the duplicates pane counting the keys that need a
-- look and a 'replays' row for the keys the ledger answered by itself.
create function ledger.pane_counts_at(at_time timestamptz)
returns table (pane text, items bigint, oldest interval)
language sql stable as $$
    select 'overdue', count(*), max(v.overdue_by) from ledger.overdue_pending_at(at_time) v
    union all
    select 'unknown', count(*), max(v.unknown_for) from ledger.unknown_outcomes_at(at_time) v
    union all
    (select case when kinds.needs_look then 'duplicates' else 'replays' end, count(v.op_key),
            ledger.instant(at_time) - min(v.first_seen)
       from (values (true), (false)) kinds (needs_look)
       left join ledger.duplicate_attempts_at(at_time) v on v.needs_look = kinds.needs_look
      group by kinds.needs_look
      order by kinds.needs_look desc)
    union all
    select 'held', count(*), max(v.held_for) from ledger.held_conflicts_at(at_time) v
    union all
    select 'escalations', count(*), max(v.age) from ledger.open_escalations_at(at_time) v
    union all
    select 'approvals', count(*), max(v.waiting_for) from ledger.awaiting_approval_at(at_time) v
    union all
    -- The entries up to the instant are all of them but those made after
    -- it: the live count is the head's, and an instant's reads only what
    -- came later.
    select 'audit',
           (select h.entries from ledger.audit_head h)
             - (select count(*) from ledger.audit_log a where at_time is not null and a.at > at_time),
           ledger.instant(at_time) - (select min(v.at) from ledger.audit_log_at(at_time) v)
$$;

create view ledger.pane_counts as select * from ledger.pane_counts_at(null);

-- The grants of what was made again (sql/0017_roles.sql): PostgreSQL lets
-- PUBLIC execute a new function, the ledger grants them one by one.
revoke execute on function ledger.duplicate_attempts_at(timestamptz), ledger.pane_counts_at(timestamptz),
    ledger.op_set_policy(text, text, text, interval, boolean, bigint, boolean, boolean, text, text, boolean,
                         boolean, boolean, text, integer)
    from public;
grant execute on function ledger.duplicate_attempts_at(timestamptz), ledger.pane_counts_at(timestamptz)
    to effect_operator, effect_readonly;
grant select on ledger.duplicate_attempts, ledger.pane_counts to effect_operator, effect_readonly;
select ledger.grant_operator_actions();
