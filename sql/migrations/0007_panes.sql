-- What the console shows, each written once as a function of an instant
-- over the ledger as of that instant (0006_as_of.sql): the four panes,
-- open escalations, compensations awaiting approval, the audit trail and
-- the count of each. The live view of each is its function at null (now);
-- `effectwatch --at T`, `list --at` and reports call the function at T. The
-- order each is read in is the console's (src/ledger/panes.rs), the same
-- live and past. Partial indexes serving the live form: 0001_tables.sql.

-- Pending past its deadline: the call was prepared or sent and no answer
-- came within the pending window.
create function ledger.overdue_pending_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, amount_minor bigint, currency text,
    provider text, requested_by text, created_at timestamptz, dispatched_at timestamptz,
    dispatched boolean, deadline_at timestamptz, overdue_by interval, age interval, version bigint)
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, e.amount_minor, e.currency, e.provider, e.requested_by,
           e.created_at, e.dispatched_at, e.dispatched_at is not null, e.deadline_at,
           ledger.instant(at_time) - e.deadline_at, ledger.instant(at_time) - e.created_at, e.version
      from ledger.effects_at(at_time) e
     where e.state = 'pending'
       and e.deadline_at < ledger.instant(at_time)
$$;

-- Outcome unknown: never retried blindly, reconciled instead.
create function ledger.unknown_outcomes_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, amount_minor bigint, currency text,
    provider text, requested_by text, unknown_since timestamptz, unknown_for interval,
    attempts bigint, last_error text, reconciliations bigint, last_finding text, findings text[],
    attention text, version bigint)
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, e.amount_minor, e.currency, e.provider, e.requested_by,
           e.state_since, ledger.instant(at_time) - e.state_since,
           (select count(*) from ledger.attempts a
             where a.effect_id = e.id and a.at <= ledger.instant(at_time)),
           e.failure_reason,
           coalesce(recon.count, 0),
           recon.last_finding,
           coalesce(recon.findings, '{}'),
           e.attention,
           e.version
      from ledger.effects_at(at_time) e
      left join lateral (
            select count(*) as count,
                   (array_agg(r.finding order by r.at desc, r.id desc))[1] as last_finding,
                   array_agg(r.finding order by r.at, r.id) as findings
              from ledger.reconciliations r
             where r.effect_id = e.id and r.at <= ledger.instant(at_time)) recon on true
     where e.state = 'unknown'
$$;

-- One row per key called again (ledger.counts_as_duplicate). A pane, not
-- an archive: the last day's repeats, and every flagged one (a mismatch, a
-- late result, a refused call) until an operator acknowledges them
-- (ledger.op_acknowledge_duplicates) or the ledger is pruned.
-- Whether one attempt puts its key in the duplicates pane at an instant:
-- a kind that counts, made by then, within the last day or flagged, and
-- after the key's repeats were last acknowledged. The pane and the rule of
-- which actions apply (ledger.why_not) both ask it; a plain SQL expression,
-- so the planner inlines it and the partial index still serves the pane.
create function ledger.shown_as_duplicate(attempt ledger.attempts, acknowledged_at timestamptz,
                                          at_time timestamptz) returns boolean
language sql stable as $$
    select ledger.counts_as_duplicate((attempt).kind)
       and (attempt).at <= ledger.instant(at_time)
       and ((attempt).at > ledger.instant(at_time) - interval '24 hours' or (attempt).flagged)
       and (attempt).at > coalesce(acknowledged_at, '-infinity')
$$;

create function ledger.duplicate_attempts_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, state text, attempts bigint,
    replays bigint, in_flight bigint, mismatches bigint, late_results bigint,
    first_seen timestamptz, last_seen timestamptz, requesters text[], has_mismatch boolean,
    version bigint)
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, e.state, d.attempts, d.replays, d.in_flight,
           d.mismatches, d.late_results, d.first_seen, d.last_seen, d.requesters,
           d.mismatches > 0, e.version
      from (select a.effect_id,
                   count(*) as attempts,
                   count(*) filter (where a.kind = 'replay') as replays,
                   count(*) filter (where a.kind = 'in_flight') as in_flight,
                   count(*) filter (where a.kind = 'mismatch') as mismatches,
                   count(*) filter (where a.kind = 'late_result') as late_results,
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
$$;

-- Held: not dispatched because another open effect on the target conflicts.
create function ledger.held_conflicts_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, target text, action text, amount_minor bigint, currency text,
    requested_by text, held_since timestamptz, held_for interval, holder_op_key text,
    holder_effect_id bigint, holder_state text, holder_age interval, holder_amount_minor bigint,
    holder_currency text, version bigint, overlap_from timestamptz, overlap_to timestamptz)
language sql stable as $$
    -- For bookings (time ranges), the stretch of time the two contend for.
    select e.op_key, e.id, e.target, e.action, e.amount_minor, e.currency, e.requested_by,
           e.state_since, ledger.instant(at_time) - e.state_since,
           h.op_key, h.id, h.state, ledger.instant(at_time) - h.created_at,
           h.amount_minor, h.currency, e.version,
           lower(e.during * h.during), upper(e.during * h.during)
      from ledger.effects_at(at_time) e
     cross join lateral ledger.effect_at(e.held_by, at_time) h
     where e.state = 'held'
$$;

create function ledger.open_escalations_at(at_time timestamptz)
returns table (
    op_key text, escalation_id bigint, escalation_key text, effect_id bigint, sink text,
    decision_needed text, state text, delivery_attempts integer, last_error text, created_by text,
    created_at timestamptz, delivered_at timestamptz, acknowledged_by text, age interval,
    effect_version bigint)
language sql stable as $$
    select s.op_key, s.id, s.escalation_key, s.effect_id, s.sink, s.decision_needed, s.state,
           s.delivery_attempts, s.last_error, s.created_by, s.created_at, s.delivered_at,
           s.acknowledged_by, ledger.instant(at_time) - s.created_at, e.version
      from ledger.escalations_at(at_time) s
     cross join lateral ledger.effect_at(s.effect_id, at_time) e
     where s.state <> 'resolved'
$$;

-- Compensations waiting for a second operator.
create function ledger.awaiting_approval_at(at_time timestamptz)
returns table (
    op_key text, request_id bigint, effect_id bigint, action text, target text,
    amount_minor bigint, currency text, approval_limit_minor bigint, requested_by text,
    reason text, requested_at timestamptz, waiting_for interval, state text, version bigint)
language sql stable as $$
    select r.op_key, r.id, r.effect_id, e.action, e.target, r.amount_minor, r.currency,
           r.approval_limit_minor, r.requested_by, r.reason, r.created_at,
           ledger.instant(at_time) - r.created_at, e.state, e.version
      from ledger.compensation_requests_at(at_time) r
     cross join lateral ledger.effect_at(r.effect_id, at_time) e
     where r.state = 'awaiting_approval'
$$;

-- The audit trail as it stood: entries made up to the instant.
create function ledger.audit_log_at(at_time timestamptz) returns setof ledger.audit_log
language sql stable as $$
    select a.* from ledger.audit_log a where at_time is null or a.at <= at_time
$$;

-- One row per view with its size and oldest item: what a monitor or a
-- console header needs without reading the views themselves. Finance has
-- its own count (ledger.finance_counts_at, 0011_finance.sql), over a window.
create function ledger.pane_counts_at(at_time timestamptz)
returns table (pane text, items bigint, oldest interval)
language sql stable as $$
    select 'overdue', count(*), max(v.overdue_by) from ledger.overdue_pending_at(at_time) v
    union all
    select 'unknown', count(*), max(v.unknown_for) from ledger.unknown_outcomes_at(at_time) v
    union all
    select 'duplicates', count(*), ledger.instant(at_time) - min(v.first_seen)
      from ledger.duplicate_attempts_at(at_time) v
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

create view ledger.overdue_pending as select * from ledger.overdue_pending_at(null);
create view ledger.unknown_outcomes as select * from ledger.unknown_outcomes_at(null);
create view ledger.duplicate_attempts as select * from ledger.duplicate_attempts_at(null);
create view ledger.held_conflicts as select * from ledger.held_conflicts_at(null);
create view ledger.open_escalations as select * from ledger.open_escalations_at(null);
create view ledger.awaiting_approval as select * from ledger.awaiting_approval_at(null);
create view ledger.pane_counts as select * from ledger.pane_counts_at(null);

-- Seconds a standby's data may be behind its primary; null on a primary.
-- Replaying: the age of the last replayed commit, or 0 once all that was
-- received is replayed (an idle primary sends nothing, so the age of its
-- last commit alone would call a caught-up standby late). But a receiver
-- that receives nothing has replayed all it received too: with no receiver
-- streaming, or one that has heard nothing from the primary for longer than
-- its pings allow (it asks for an answer after wal_receiver_timeout / 2),
-- the data is as old as the last word from the primary, or the last commit
-- replayed. Security definer: pg_stat_wal_receiver shows its details only
-- to privileged roles, which a console's login is not; without them (an
-- owner that is not privileged either) a running receiver is trusted.
create function ledger.replica_lag() returns float8
language sql stable security definer
set search_path = pg_catalog, pg_temp
as $$
    with receiver as (
        select r.pid, r.status, r.last_msg_receipt_time from pg_stat_wal_receiver r
    ),
    replay as (
        select case when pg_last_wal_receive_lsn() is not distinct from pg_last_wal_replay_lsn()
                    then 0::float8
                    else coalesce(extract(epoch from now() - pg_last_xact_replay_timestamp())::float8, 0)
               end as lag
    ),
    allowed as (
        select make_interval(secs => coalesce(nullif(s.setting::float8, 0), 60000) / 2000 + 5) as silence
          from pg_settings s where s.name = 'wal_receiver_timeout'
    )
    select case when pg_is_in_recovery() then
        case when exists (select 1 from receiver r, allowed a
                           where r.status is null
                              or (r.status = 'streaming'
                                  and (r.last_msg_receipt_time is null
                                       or now() - r.last_msg_receipt_time <= a.silence)))
             then (select lag from replay)
             else greatest((select lag from replay),
                           extract(epoch from now() - coalesce(
                               (select r.last_msg_receipt_time from receiver r),
                               pg_last_xact_replay_timestamp()))::float8)
        end
    end
$$;
