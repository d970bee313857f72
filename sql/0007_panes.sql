-- The panes: what an operator must look at now, and as it was at any past
-- instant. Their partial indexes are in 0001_tables.sql.

create view ledger.overdue_pending as
select e.op_key,
       e.id as effect_id,
       e.action,
       e.target,
       e.amount_minor,
       e.currency,
       e.provider,
       e.requested_by,
       e.created_at,
       e.dispatched_at,
       e.dispatched_at is not null as dispatched,
       e.deadline_at,
       now() - e.deadline_at as overdue_by,
       now() - e.created_at as age,
       e.version
  from ledger.effects e
 where e.state = 'pending'
   and e.deadline_at < now();

create view ledger.unknown_outcomes as
select e.op_key,
       e.id as effect_id,
       e.action,
       e.target,
       e.amount_minor,
       e.currency,
       e.provider,
       e.requested_by,
       coalesce(since.at, e.updated_at) as unknown_since,
       now() - coalesce(since.at, e.updated_at) as unknown_for,
       coalesce(tries.attempts, 0) as attempts,
       e.failure_reason as last_error,
       coalesce(recon.count, 0) as reconciliations,
       recon.last_finding,
       coalesce(recon.findings, '{}') as findings,
       e.attention,
       e.version
  from ledger.effects e
  left join lateral (
        select max(ev.at) as at from ledger.effect_events ev
         where ev.effect_id = e.id and ev.to_state = 'unknown') since on true
  left join lateral (
        select count(*) as attempts from ledger.attempts a where a.effect_id = e.id) tries on true
  left join lateral (
        select count(*) as count,
               (array_agg(r.finding order by r.at desc))[1] as last_finding,
               array_agg(r.finding order by r.at) as findings
          from ledger.reconciliations r where r.effect_id = e.id) recon on true
 where e.state = 'unknown';

create view ledger.duplicate_attempts as
select e.op_key,
       e.id as effect_id,
       e.action,
       e.target,
       e.state,
       d.attempts,
       d.replays,
       d.in_flight,
       d.mismatches,
       d.late_results,
       d.first_seen,
       d.last_seen,
       d.requesters,
       d.mismatches > 0 as has_mismatch,
       e.version
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
         where a.kind in ('replay', 'in_flight', 'retry', 'stop', 'mismatch', 'held',
                          'late_result', 'dispatch_refused', 'refused')
           -- A pane, not an archive: the last day's repeats, and every flagged
           -- one (a mismatch, a late result) until the ledger is pruned.
           and (a.at > now() - interval '24 hours' or a.flagged)
         group by a.effect_id) d
  join ledger.effects e on e.id = d.effect_id;

create view ledger.held_conflicts as
select e.op_key,
       e.id as effect_id,
       e.target,
       e.action,
       e.amount_minor,
       e.currency,
       e.requested_by,
       e.created_at as held_since,
       now() - e.created_at as held_for,
       h.op_key as holder_op_key,
       h.id as holder_effect_id,
       h.state as holder_state,
       now() - h.created_at as holder_age,
       h.amount_minor as holder_amount_minor,
       h.currency as holder_currency,
       e.version
  from ledger.effects e
  join ledger.effects h on h.id = e.held_by
 where e.state = 'held';

create view ledger.open_escalations as
select s.op_key,
       s.id as escalation_id,
       s.escalation_key,
       s.effect_id,
       s.sink,
       s.decision_needed,
       s.state,
       s.delivery_attempts,
       s.last_error,
       s.created_by,
       s.created_at,
       s.delivered_at,
       s.acknowledged_by,
       now() - s.created_at as age
  from ledger.escalations s
 where s.state <> 'resolved';

-- One row per pane with its size and oldest item: what a monitor or a
-- console header needs without reading the panes themselves.
create view ledger.pane_counts as
select 'overdue' as pane, count(*) as items, max(overdue_by) as oldest from ledger.overdue_pending
union all
select 'unknown', count(*), max(unknown_for) from ledger.unknown_outcomes
union all
select 'duplicates', count(*), now() - min(first_seen) from ledger.duplicate_attempts
union all
select 'held', count(*), max(held_for) from ledger.held_conflicts;

-- Time travel ----------------------------------------------------------------
-- The panes as they were at a past instant, rebuilt from effect_events
-- (state changes), attempts (dispatches, duplicates), reconciliations and
-- holds. Same columns as the live views, ages measured at that instant. A
-- deadline then is the start of the pending period or the dispatch within
-- it, whichever is later, plus the effect's pending_window: exactly what
-- begin_effect, mark_dispatched, a retry and a release set deadline_at to.
-- `version` is 0, which no effect ever has: an action taken from a row of
-- the past is refused as "changed since you looked".

-- Effects that were open (pending, unknown, held) at an instant, with that
-- state and when they entered it. An effect settled now whose settled_at
-- is not after the instant was settled then (settled_at is the time of the
-- last state change of a settled effect), so only open effects and those
-- settled since are read.
create function ledger.open_states_at(at_time timestamptz)
returns table (effect_id bigint, state text, state_since timestamptz)
language sql stable as $$
    select e.id, s.to_state, s.at
      from ledger.effects e
     cross join lateral (
            select ev.to_state, ev.at from ledger.effect_events ev
             where ev.effect_id = e.id and ev.at <= open_states_at.at_time
             order by ev.at desc, ev.id desc limit 1) s
     where e.created_at <= open_states_at.at_time
       and (e.state in ('pending', 'unknown', 'held') or e.settled_at > open_states_at.at_time)
       and s.to_state in ('pending', 'unknown', 'held')
$$;

create function ledger.overdue_pending_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, amount_minor bigint, currency text,
    provider text, requested_by text, created_at timestamptz, dispatched_at timestamptz,
    dispatched boolean, deadline_at timestamptz, overdue_by interval, age interval, version bigint)
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, e.amount_minor, e.currency, e.provider, e.requested_by,
           e.created_at, d.at, d.at is not null, dl.deadline_at,
           overdue_pending_at.at_time - dl.deadline_at, overdue_pending_at.at_time - e.created_at,
           0::bigint
      from ledger.open_states_at(overdue_pending_at.at_time) s
      join ledger.effects e on e.id = s.effect_id
     cross join lateral (
            select max(a.at) as at from ledger.attempts a
             where a.effect_id = e.id and a.kind = 'dispatch'
               and a.at >= s.state_since and a.at <= overdue_pending_at.at_time) d
     cross join lateral (select greatest(s.state_since, d.at) + e.pending_window as deadline_at) dl
     where s.state = 'pending'
       and dl.deadline_at < overdue_pending_at.at_time
$$;

create function ledger.unknown_outcomes_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, amount_minor bigint, currency text,
    provider text, requested_by text, unknown_since timestamptz, unknown_for interval,
    attempts bigint, last_error text, reconciliations bigint, last_finding text, findings text[],
    attention text, version bigint)
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, e.amount_minor, e.currency, e.provider, e.requested_by,
           s.state_since, unknown_outcomes_at.at_time - s.state_since,
           (select count(*) from ledger.attempts a
             where a.effect_id = e.id and a.at <= unknown_outcomes_at.at_time),
           -- The reason the worker gave with the outcome that made it unknown.
           (select a.detail ->> 'reason' from ledger.attempts a
             where a.effect_id = e.id and a.kind = 'completion' and a.at = s.state_since
             order by a.id desc limit 1),
           coalesce(recon.count, 0),
           recon.last_finding,
           coalesce(recon.findings, '{}'),
           case when conclusive.finding in ('duplicate', 'mismatch') then conclusive.finding end,
           0::bigint
      from ledger.open_states_at(unknown_outcomes_at.at_time) s
      join ledger.effects e on e.id = s.effect_id
      left join lateral (
            select count(*) as count,
                   (array_agg(r.finding order by r.at desc, r.id desc))[1] as last_finding,
                   array_agg(r.finding order by r.at, r.id) as findings
              from ledger.reconciliations r
             where r.effect_id = e.id and r.at <= unknown_outcomes_at.at_time) recon on true
      -- The flag is that of the latest conclusive reconciliation since the
      -- effect was last settled (settling clears it).
      left join lateral (
            select r.finding from ledger.reconciliations r
             where r.effect_id = e.id and r.at <= unknown_outcomes_at.at_time
               and r.finding <> 'indeterminate'
               and r.at > coalesce((select max(ev.at) from ledger.effect_events ev
                                     where ev.effect_id = e.id and ev.at <= unknown_outcomes_at.at_time
                                       and ev.to_state in ('succeeded', 'failed', 'compensated', 'cancelled')),
                                   '-infinity')
             order by r.at desc, r.id desc limit 1) conclusive on true
     where s.state = 'unknown'
$$;

create function ledger.duplicate_attempts_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, state text, attempts bigint,
    replays bigint, in_flight bigint, mismatches bigint, late_results bigint,
    first_seen timestamptz, last_seen timestamptz, requesters text[], has_mismatch boolean,
    version bigint)
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, s.to_state, d.attempts, d.replays, d.in_flight,
           d.mismatches, d.late_results, d.first_seen, d.last_seen, d.requesters,
           d.mismatches > 0, 0::bigint
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
             where a.kind in ('replay', 'in_flight', 'retry', 'stop', 'mismatch', 'held',
                              'late_result', 'dispatch_refused', 'refused')
               and a.at <= duplicate_attempts_at.at_time
             group by a.effect_id) d
      join ledger.effects e on e.id = d.effect_id
     cross join lateral (
            select ev.to_state from ledger.effect_events ev
             where ev.effect_id = e.id and ev.at <= duplicate_attempts_at.at_time
             order by ev.at desc, ev.id desc limit 1) s
$$;

create function ledger.held_conflicts_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, target text, action text, amount_minor bigint, currency text,
    requested_by text, held_since timestamptz, held_for interval, holder_op_key text,
    holder_effect_id bigint, holder_state text, holder_age interval, holder_amount_minor bigint,
    holder_currency text, version bigint)
language sql stable as $$
    select e.op_key, e.id, e.target, e.action, e.amount_minor, e.currency, e.requested_by,
           s.state_since, held_conflicts_at.at_time - s.state_since,
           h.op_key, h.id, hs.to_state, held_conflicts_at.at_time - h.created_at,
           h.amount_minor, h.currency, 0::bigint
      from ledger.open_states_at(held_conflicts_at.at_time) s
      join ledger.effects e on e.id = s.effect_id
     cross join lateral (
            select ho.holder_id from ledger.holds ho
             where ho.effect_id = e.id and ho.created_at <= held_conflicts_at.at_time
               and (ho.closed_at is null or ho.closed_at > held_conflicts_at.at_time)
             order by ho.id desc limit 1) hold
      join ledger.effects h on h.id = hold.holder_id
     cross join lateral (
            select ev.to_state from ledger.effect_events ev
             where ev.effect_id = h.id and ev.at <= held_conflicts_at.at_time
             order by ev.at desc, ev.id desc limit 1) hs
     where s.state = 'held'
$$;

-- ledger.pane_counts as it was at an instant.
create function ledger.pane_counts_at(at_time timestamptz)
returns table (pane text, items bigint, oldest interval)
language sql stable as $$
    select 'overdue', count(*), max(v.overdue_by) from ledger.overdue_pending_at(pane_counts_at.at_time) v
    union all
    select 'unknown', count(*), max(v.unknown_for) from ledger.unknown_outcomes_at(pane_counts_at.at_time) v
    union all
    select 'duplicates', count(*), pane_counts_at.at_time - min(v.first_seen)
      from ledger.duplicate_attempts_at(pane_counts_at.at_time) v
    union all
    select 'held', count(*), max(v.held_for) from ledger.held_conflicts_at(pane_counts_at.at_time) v
$$;
