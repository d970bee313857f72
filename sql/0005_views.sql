-- The panes. Each view is served by a partial index over the rows that can
-- appear in it, so a poll costs what is open, not what the ledger has seen.

create index effects_pending_deadline_idx on ledger.effects (deadline_at) where state = 'pending';
create index effects_unknown_idx on ledger.effects (updated_at) where state = 'unknown';
create index effects_held_idx on ledger.effects (target, created_at) where state = 'held';
create index effects_open_target_idx on ledger.effects (target, action, created_at)
    where state in ('pending', 'unknown', 'held');

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
