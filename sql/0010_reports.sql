-- For the people who do not watch live: finance (suspected double effects,
-- exposure per currency), incident responders (what entered each pane over a
-- range, the panes as they were at a past instant) and retention (prune).
-- Everything here only reads the ledger, except ledger.prune_settled.

-- Indexes for reading by time: a report over a range, time travel and
-- retention cost what happened in that range, not the whole ledger.
create index effects_settled_at_idx on ledger.effects (settled_at) where settled_at is not null;
create index reconciliations_at_idx on ledger.reconciliations (at);
-- Duplicate attempts by time: ledger.attempts_duplicate_idx (0001).

-- Finance ----------------------------------------------------------------------

-- The amount an approval allows, as the writer recorded it in the effect's
-- params: "approved_amount_minor", an integer in the effect's currency.
-- Anything else (absent, a string, a fraction) means "not stated".
create function ledger.approved_amount(params jsonb) returns bigint
language sql immutable as $$
    select case when jsonb_typeof(params -> 'approved_amount_minor') = 'number'
                 and (params ->> 'approved_amount_minor') ~ '^-?[0-9]{1,18}$'
                then (params ->> 'approved_amount_minor')::bigint end
$$;

-- How the compensation of an effect stands: 'awaiting_approval' (a request
-- waits for a second operator), the state of its latest compensation effect
-- ('pending', 'dispatched', 'held', 'unknown', 'succeeded', 'failed',
-- 'cancelled'), 'rejected' (the last request was turned down) or 'none'.
create function ledger.compensation_status(effect_id bigint, out status text, out compensation_key text)
language sql stable as $$
    select case
               when req.state = 'awaiting_approval' then 'awaiting_approval'
               when comp.op_key is not null then comp.status
               when req.state = 'rejected' then 'rejected'
               else 'none' end,
           case when req.state is distinct from 'awaiting_approval' then comp.op_key end
      from (select 1) one
      left join lateral (
            select c.op_key,
                   case when c.state = 'pending' and c.dispatched_at is not null then 'dispatched'
                        else c.state end as status
              from ledger.effects c
             where c.compensates = compensation_status.effect_id
             order by c.id desc limit 1) comp on true
      left join lateral (
            select r.state from ledger.compensation_requests r
             where r.effect_id = compensation_status.effect_id
             order by r.id desc limit 1) req on true
$$;

-- Suspected double effects: succeeded effects (compensations aside) on a
-- target that has
--   'repeated':           more than one succeeded effect of the same action;
--   'over_approved':      a succeeded total, in one currency, above what the
--                         approvals on record allow (ledger.approved_amount;
--                         per approval_ref the latest version counts, effects
--                         without approval_ref count as their own approval);
--   'provider_duplicate': a reconciliation found the effect twice at the
--                         provider (attention = 'duplicate').
-- One row per effect, with its group's figures in its currency:
--   total_minor:    the succeeded total of the group in that currency;
--   approved_minor: what the approvals allow, null when none says;
--   excess_minor:   the money moved beyond what one effect or the approvals
--                   explain: total - coalesce(approved, earliest effect's
--                   amount), at least 0, plus the amount of each effect the
--                   provider holds twice.
-- Totals are never summed across currencies. A compensated effect is no
-- longer succeeded, so a double that was reversed leaves this list (and
-- shows under "compensated" in ledger.exposure). `since` keeps the targets
-- with a success since then; null: all.
create function ledger.suspected_double_effects_since(since timestamptz)
returns table (
    target text, action text, op_key text, effect_id bigint,
    amount_minor bigint, currency text, provider text, external_ref text,
    approval_ref text, approval_version integer, requested_by text,
    succeeded_at timestamptz, reasons text[], succeeded_effects bigint,
    total_minor bigint, approved_minor bigint, excess_minor bigint,
    compensation text, compensation_key text, compensation_under_way boolean,
    version bigint)
language sql stable as $$
    with touched as (
        -- settled_at <= updated_at, so the updated_at index narrows the scan.
        select distinct e.target, e.action
          from ledger.effects e
         where e.state = 'succeeded' and e.compensates is null
           and (suspected_double_effects_since.since is null
                or (e.updated_at >= suspected_double_effects_since.since
                    and e.settled_at >= suspected_double_effects_since.since))
    ),
    members as (
        select e.*
          from ledger.effects e
          join touched t on t.target = e.target and t.action = e.action
         where e.state = 'succeeded' and e.compensates is null
    ),
    counts as (
        select m.target, m.action, count(*) as n from members m group by m.target, m.action
    ),
    approvals as (
        select a.target, a.action, a.currency, sum(a.approved)::bigint as approved
          from (select distinct on (e.target, e.action, e.currency, coalesce(e.approval_ref, e.op_key))
                       e.target, e.action, e.currency, ledger.approved_amount(e.params) as approved
                  from ledger.effects e
                  join touched t on t.target = e.target and t.action = e.action
                 where e.compensates is null and e.currency is not null
                   and ledger.approved_amount(e.params) is not null
                 order by e.target, e.action, e.currency, coalesce(e.approval_ref, e.op_key),
                          e.approval_version desc nulls last, e.id desc) a
         group by a.target, a.action, a.currency
    ),
    totals as (
        select m.target, m.action, m.currency,
               sum(m.amount_minor)::bigint as total,
               (array_agg(m.amount_minor order by m.settled_at, m.id))[1] as earliest,
               coalesce(sum(m.amount_minor) filter (where m.attention = 'duplicate'), 0)::bigint as twice
          from members m
         where m.currency is not null
         group by m.target, m.action, m.currency
    ),
    figured as (
        select m.*, c.n, t.total, ap.approved,
               greatest(t.total - coalesce(ap.approved, t.earliest), 0) + t.twice as excess,
               array_remove(array[
                   case when c.n > 1 then 'repeated' end,
                   case when t.total > ap.approved then 'over_approved' end,
                   case when m.attention = 'duplicate' then 'provider_duplicate' end], null) as reasons
          from members m
          join counts c on c.target = m.target and c.action = m.action
          left join totals t on t.target = m.target and t.action = m.action and t.currency = m.currency
          left join approvals ap on ap.target = m.target and ap.action = m.action and ap.currency = m.currency
    )
    select f.target, f.action, f.op_key, f.id, f.amount_minor, f.currency, f.provider, f.external_ref,
           f.approval_ref, f.approval_version, f.requested_by, f.settled_at, f.reasons, f.n,
           f.total, f.approved, f.excess,
           cs.status, cs.compensation_key,
           cs.status in ('awaiting_approval', 'pending', 'dispatched', 'held', 'unknown'),
           f.version
      from figured f
     cross join lateral ledger.compensation_status(f.id) cs
     where cardinality(f.reasons) > 0
     order by f.target, f.action, f.currency nulls last, f.settled_at, f.id
$$;

create view ledger.suspected_double_effects as
select * from ledger.suspected_double_effects_since(null);

-- Money at risk per currency (effects without an amount are not money):
-- in unknown effects, in suspected double effects (their excess, see
-- above), already compensated, and in compensation requests awaiting a
-- second operator. `since`: unknown effects created, doubles with a success,
-- compensations settled and requests made since then; null: all.
create function ledger.exposure_since(since timestamptz)
returns table (
    currency text,
    unknown_effects bigint, unknown_minor bigint,
    suspected_effects bigint, suspected_excess_minor bigint,
    compensated_effects bigint, compensated_minor bigint,
    awaiting_approval bigint, awaiting_approval_minor bigint)
language sql stable as $$
    with items as (
        select e.currency, 'unknown' as kind, count(*) as n, sum(e.amount_minor) as minor
          from ledger.effects e
         where e.state = 'unknown' and e.currency is not null
           and (exposure_since.since is null or e.created_at >= exposure_since.since)
         group by e.currency
        union all
        select g.currency, 'suspected', sum(g.n), sum(g.excess)
          from (select s.currency, count(*) as n, max(s.excess_minor) as excess
                  from ledger.suspected_double_effects_since(exposure_since.since) s
                 where s.currency is not null
                 group by s.target, s.action, s.currency) g
         group by g.currency
        union all
        select e.currency, 'compensated', count(*), sum(e.amount_minor)
          from ledger.effects e
         where e.state = 'compensated' and e.currency is not null
           and (exposure_since.since is null or e.settled_at >= exposure_since.since)
         group by e.currency
        union all
        select r.currency, 'awaiting_approval', count(*), sum(r.amount_minor)
          from ledger.compensation_requests r
         where r.state = 'awaiting_approval' and r.currency is not null
           and (exposure_since.since is null or r.created_at >= exposure_since.since)
         group by r.currency
    )
    select i.currency,
           coalesce(sum(i.n) filter (where i.kind = 'unknown'), 0)::bigint,
           coalesce(sum(i.minor) filter (where i.kind = 'unknown'), 0)::bigint,
           coalesce(sum(i.n) filter (where i.kind = 'suspected'), 0)::bigint,
           coalesce(sum(i.minor) filter (where i.kind = 'suspected'), 0)::bigint,
           coalesce(sum(i.n) filter (where i.kind = 'compensated'), 0)::bigint,
           coalesce(sum(i.minor) filter (where i.kind = 'compensated'), 0)::bigint,
           coalesce(sum(i.n) filter (where i.kind = 'awaiting_approval'), 0)::bigint,
           coalesce(sum(i.minor) filter (where i.kind = 'awaiting_approval'), 0)::bigint
      from items i
     group by i.currency
     order by i.currency
$$;

create view ledger.exposure as
select * from ledger.exposure_since(null);

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

-- Post-mortems ---------------------------------------------------------------

-- Every item that entered a pane in [since, until), when it left the pane
-- (null: it has not; may be after `until`) and what it became:
--   overdue:    its deadline passed while pending; left when the state
--               changed or a dispatch reset the deadline ('dispatched');
--   unknown:    it became unknown; left at its next state change;
--   held:       it was held; left when released or cancelled;
--   duplicates: its first duplicate attempt (one item per key, as the
--               pane); resolved when the effect was settled (at once if it
--               already was: a replay of a settled effect is harmless).
-- target_like / action_like: ILIKE patterns (null: any).
create function ledger.pane_entries(
    since timestamptz, until timestamptz, target_like text default null, action_like text default null
) returns table (
    pane text, effect_id bigint, op_key text, target text, action text,
    amount_minor bigint, currency text, entered_at timestamptz, resolved_at timestamptz,
    resolved_to text)
language sql stable as $$
    with scope as (
        select e.* from ledger.effects e
         where (pane_entries.target_like is null or e.target ilike pane_entries.target_like)
           and (pane_entries.action_like is null or e.action ilike pane_entries.action_like)
    ),
    -- Effects that can have been pending during the range: open now, or
    -- changed since it began.
    maybe_pending as (
        select s.* from scope s
         where s.created_at < pane_entries.until
           and (s.state in ('pending', 'unknown', 'held') or s.updated_at >= pane_entries.since)
    ),
    pending_periods as (
        select ev.effect_id, ev.at as started, nxt.at as ended, nxt.to_state as became
          from ledger.effect_events ev
          join maybe_pending m on m.id = ev.effect_id
          left join lateral (
                select n.at, n.to_state from ledger.effect_events n
                 where n.effect_id = ev.effect_id and (n.at, n.id) > (ev.at, ev.id)
                 order by n.at, n.id limit 1) nxt on true
         where ev.to_state = 'pending' and ev.at < pane_entries.until
    ),
    periods_dispatch as (
        select p.*, d.at as dispatched
          from pending_periods p
         cross join lateral (
                select min(a.at) as at from ledger.attempts a
                 where a.effect_id = p.effect_id and a.kind = 'dispatch'
                   and a.at >= p.started and (p.ended is null or a.at < p.ended)) d
    ),
    -- A deadline runs from the start of the period until the dispatch, then
    -- from the dispatch until the end of the period.
    deadline_runs as (
        select p.effect_id, p.started as run_start, coalesce(p.dispatched, p.ended) as run_end,
               case when p.dispatched is not null then 'dispatched' else p.became end as became
          from periods_dispatch p
        union all
        select p.effect_id, p.dispatched, p.ended, p.became
          from periods_dispatch p
         where p.dispatched is not null
    ),
    overdue as (
        select 'overdue' as pane, r.effect_id, r.run_start + m.pending_window as entered_at,
               r.run_end as resolved_at, r.became as resolved_to
          from deadline_runs r
          join maybe_pending m on m.id = r.effect_id
         where r.run_start + m.pending_window >= pane_entries.since
           and r.run_start + m.pending_window < pane_entries.until
           and (r.run_end is null or r.run_start + m.pending_window < r.run_end)
    ),
    unknown_or_held as (
        select ev.to_state as pane, ev.effect_id, ev.at as entered_at, nxt.at as resolved_at,
               nxt.to_state as resolved_to
          from ledger.effect_events ev
          join scope s on s.id = ev.effect_id
          left join lateral (
                select n.at, n.to_state from ledger.effect_events n
                 where n.effect_id = ev.effect_id and (n.at, n.id) > (ev.at, ev.id)
                 order by n.at, n.id limit 1) nxt on true
         where ev.to_state in ('unknown', 'held')
           and ev.at >= pane_entries.since and ev.at < pane_entries.until
    ),
    first_duplicates as (
        select f.effect_id, f.first_seen
          from (select distinct a.effect_id from ledger.attempts a
                 where a.kind in ('replay', 'in_flight', 'retry', 'stop', 'mismatch', 'held',
                                  'late_result', 'dispatch_refused', 'refused')
                   and a.at >= pane_entries.since and a.at < pane_entries.until) recent
         cross join lateral (
                select recent.effect_id, min(a.at) as first_seen from ledger.attempts a
                 where a.effect_id = recent.effect_id
                   and a.kind in ('replay', 'in_flight', 'retry', 'stop', 'mismatch', 'held',
                                  'late_result', 'dispatch_refused', 'refused')) f
         where f.first_seen >= pane_entries.since
    ),
    duplicates as (
        select 'duplicates' as pane, f.effect_id, f.first_seen as entered_at,
               case when st.to_state in ('succeeded', 'failed', 'compensated', 'cancelled')
                    then f.first_seen else later.at end as resolved_at,
               case when st.to_state in ('succeeded', 'failed', 'compensated', 'cancelled')
                    then st.to_state else later.to_state end as resolved_to
          from first_duplicates f
          join scope s on s.id = f.effect_id
         cross join lateral (
                select ev.to_state from ledger.effect_events ev
                 where ev.effect_id = f.effect_id and ev.at <= f.first_seen
                 order by ev.at desc, ev.id desc limit 1) st
          left join lateral (
                select ev.at, ev.to_state from ledger.effect_events ev
                 where ev.effect_id = f.effect_id and ev.at > f.first_seen
                   and ev.to_state in ('succeeded', 'failed', 'compensated', 'cancelled')
                 order by ev.at, ev.id limit 1) later on true
    ),
    entries as (
        select * from overdue
        union all select * from unknown_or_held
        union all select * from duplicates
    )
    select x.pane, x.effect_id, e.op_key, e.target, e.action, e.amount_minor, e.currency,
           x.entered_at, x.resolved_at, x.resolved_to
      from entries x
      join ledger.effects e on e.id = x.effect_id
     order by x.entered_at, x.effect_id, x.pane
$$;

-- Retention ------------------------------------------------------------------
--
-- ledger.prune_settled removes old settled effects with their attempts,
-- state history, reconciliations and holds. What it never removes:
--   * effects that are not settled, or settled in a way that still needs a
--     person: pending, held, unknown, compensated, failed and retryable,
--     flagged (attention, late result);
--   * effects named by the audit trail: audit_log rows are never deleted,
--     and nulling their effect_id would both be an UPDATE of an append-only
--     table and break the hash chain (effect_id is hashed). So an effect any
--     operator acted on stays as long as the audit trail, i.e. for good;
--   * effects with an escalation (in any state: escalations keep the
--     delivery record, and every escalation is audited anyway);
--   * effects linked to another: a compensation or a compensated original,
--     either side of a hold, the subject of a compensation request;
--   * members of a suspected double effect (ledger.suspected_double_effects):
--     the evidence finance needs.
-- It never touches audit_log; it appends one entry of its own with counts.
--
-- The bypass of the append-only triggers on attempts and effect_events:
-- those triggers now let a DELETE through only when (1) the transaction-
-- local setting ledger.prune_xact equals the id of the current transaction,
-- which prune_settled sets just before its deletes and clears right after,
-- and (2) the row's effect still exists and is settled (succeeded, failed or
-- cancelled): prune_settled deletes children before their effect. UPDATE
-- and TRUNCATE stay refused. Why this is safe: only a role holding DELETE on
-- those tables can try at all, which is the owner (agents, operators and
-- read-only consoles hold none, and prune_settled is not granted to them);
-- a value set by hand in one transaction never matches another's id; and the
-- owner, who could forge it deliberately, could drop the trigger too: the
-- trigger guards against accidents, the function makes the sanctioned path
-- narrow and audited.

-- Why an old settled effect must stay; null: it may be pruned.
create function ledger.prune_review(cutoff timestamptz)
returns table (effect_id bigint, op_key text, state text, kept_because text)
language sql stable as $$
    with old as (
        select e.* from ledger.effects e
         where e.settled_at is not null and e.settled_at < prune_review.cutoff
    ),
    suspected as (
        select s.effect_id from ledger.suspected_double_effects_since(null) s
    )
    select o.id, o.op_key, o.state,
           case
               when o.state not in ('succeeded', 'failed', 'cancelled') then o.state
               when o.state = 'failed' and coalesce(o.retryable, false) then 'retryable'
               when o.attention is not null or o.late_result_at is not null then 'needs_attention'
               when exists (select 1 from ledger.audit_log a where a.effect_id = o.id) then 'operator_action'
               when exists (select 1 from ledger.escalations s where s.effect_id = o.id) then 'escalated'
               when o.compensates is not null
                    or exists (select 1 from ledger.effects x where x.compensates = o.id or x.held_by = o.id)
                    or exists (select 1 from ledger.holds h where h.effect_id = o.id or h.holder_id = o.id)
                    or exists (select 1 from ledger.compensation_requests r
                                where r.effect_id = o.id or r.compensation_id = o.id) then 'linked'
               when o.id in (select s.effect_id from suspected s) then 'suspected_double'
           end
      from old o
$$;

create function ledger.append_only_except_prune() returns trigger
language plpgsql as $$
begin
    if tg_op = 'DELETE'
       and current_setting('ledger.prune_xact', true) = pg_current_xact_id()::text
       and exists (select 1 from ledger.effects e
                    where e.id = old.effect_id and e.state in ('succeeded', 'failed', 'cancelled')) then
        return old;
    end if;
    raise exception 'ledger: % is append-only (% refused)', tg_table_schema || '.' || tg_table_name, tg_op
        using errcode = 'insufficient_privilege',
              hint = 'old settled effects are removed with ledger.prune_settled';
end
$$;

drop trigger attempts_append_only on ledger.attempts;
create trigger attempts_append_only
    before update or delete on ledger.attempts
    for each row execute function ledger.append_only_except_prune();
drop trigger effect_events_append_only on ledger.effect_events;
create trigger effect_events_append_only
    before update or delete on ledger.effect_events
    for each row execute function ledger.append_only_except_prune();
alter table ledger.attempts enable always trigger attempts_append_only;
alter table ledger.effect_events enable always trigger effect_events_append_only;

-- Locks the effects settled before the cutoff (so no operator action or
-- escalation can name one while a prune runs) and returns those that may be
-- pruned, each as one JSON record of everything prune_settled would delete:
-- what `effectwatch prune --export` writes before deleting.
create function ledger.prune_export(older_than interval)
returns table (effect_id bigint, data jsonb)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    cutoff timestamptz;
begin
    if older_than is null or older_than < interval '0' then
        raise exception 'ledger: prune needs an age of at least 0 (got %)', older_than
            using errcode = 'invalid_parameter_value';
    end if;
    cutoff := now() - older_than;
    perform pg_advisory_xact_lock(hashtextextended('ledger.prune', 0));
    perform 1 from ledger.effects e
      where e.settled_at is not null and e.settled_at < cutoff
      order by e.id
        for update;
    return query
    select e.id,
           jsonb_build_object(
               'effect', to_jsonb(e),
               'attempts', coalesce((select jsonb_agg(to_jsonb(a) order by a.id)
                                       from ledger.attempts a where a.effect_id = e.id), '[]'),
               'events', coalesce((select jsonb_agg(to_jsonb(ev) order by ev.id)
                                     from ledger.effect_events ev where ev.effect_id = e.id), '[]'),
               'reconciliations', coalesce((select jsonb_agg(to_jsonb(r) order by r.id)
                                              from ledger.reconciliations r where r.effect_id = e.id), '[]'),
               'holds', coalesce((select jsonb_agg(to_jsonb(h) order by h.id)
                                    from ledger.holds h where h.effect_id = e.id or h.holder_id = e.id), '[]'))
      from ledger.prune_review(cutoff) v
      join ledger.effects e on e.id = v.effect_id
     where v.kept_because is null
     order by e.id;
end
$$;

-- Deletes the effects settled more than `older_than` ago that nothing
-- protects (see above) — only those in only_ids when given, which is how
-- the CLI deletes exactly what it exported — and appends one audit entry
-- with the counts. Owner only.
create function ledger.prune_settled(
    older_than interval, operator text, reason text, only_ids bigint[] default null
) returns table (effects bigint, attempts bigint, events bigint, reconciliations bigint, holds bigint,
                 kept jsonb, cutoff timestamptz, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    limit_at     timestamptz;
    doomed       bigint[];
    kept_counts  jsonb;
    n_effects    bigint;
    n_attempts   bigint;
    n_events     bigint;
    n_recons     bigint;
    n_holds      bigint;
    seq          bigint;
begin
    if coalesce(btrim(prune_settled.operator), '') = '' then
        raise exception 'ledger: an operator name is required' using errcode = 'invalid_parameter_value';
    end if;
    if coalesce(btrim(prune_settled.reason), '') = '' then
        raise exception 'ledger: a reason is required to prune' using errcode = 'invalid_parameter_value';
    end if;
    if prune_settled.older_than is null or prune_settled.older_than < interval '0' then
        raise exception 'ledger: prune needs an age of at least 0 (got %)', prune_settled.older_than
            using errcode = 'invalid_parameter_value';
    end if;
    limit_at := now() - prune_settled.older_than;
    -- One prune at a time; lock the candidates before judging them, so an
    -- audit entry or escalation naming one waits until we are done.
    perform pg_advisory_xact_lock(hashtextextended('ledger.prune', 0));
    perform 1 from ledger.effects e
      where e.settled_at is not null and e.settled_at < limit_at
      order by e.id
        for update;

    with review as (select * from ledger.prune_review(limit_at))
    select (select coalesce(array_agg(v.effect_id order by v.effect_id), '{}') from review v
             where v.kept_because is null
               and (prune_settled.only_ids is null or v.effect_id = any (prune_settled.only_ids))),
           (select coalesce(jsonb_object_agg(g.kept_because, g.n), '{}')
              from (select v.kept_because, count(*) as n from review v
                     where v.kept_because is not null group by v.kept_because) g)
      into doomed, kept_counts;

    perform set_config('ledger.prune_xact', pg_current_xact_id()::text, true);
    delete from ledger.attempts a where a.effect_id = any (doomed);
    get diagnostics n_attempts = row_count;
    delete from ledger.effect_events ev where ev.effect_id = any (doomed);
    get diagnostics n_events = row_count;
    delete from ledger.reconciliations r where r.effect_id = any (doomed);
    get diagnostics n_recons = row_count;
    delete from ledger.holds h where h.effect_id = any (doomed) or h.holder_id = any (doomed);
    get diagnostics n_holds = row_count;
    delete from ledger.effects e where e.id = any (doomed) and e.state in ('succeeded', 'failed', 'cancelled');
    get diagnostics n_effects = row_count;
    perform set_config('ledger.prune_xact', '', true);

    seq := ledger.audit(prune_settled.operator, 'prune', null::ledger.effects, prune_settled.reason,
                        jsonb_build_object('older_than', prune_settled.older_than::text, 'cutoff', limit_at),
                        jsonb_build_object('effects', n_effects, 'attempts', n_attempts, 'events', n_events,
                                           'reconciliations', n_recons, 'holds', n_holds,
                                           'kept', kept_counts));
    return query select n_effects, n_attempts, n_events, n_recons, n_holds, kept_counts, limit_at, seq;
end
$$;

-- Grants, as in 0007: nothing new is PUBLIC's. Finance, reports and time
-- travel are readable by every console; retention (prune_export,
-- prune_settled, prune_review) is the owner's alone — grant execute on
-- prune_settled to a dedicated role to delegate it, never to operators.
revoke execute on all functions in schema ledger from public;
grant select on ledger.suspected_double_effects, ledger.exposure to effect_operator, effect_readonly;
grant execute on function
    ledger.approved_amount(jsonb),
    ledger.compensation_status(bigint),
    ledger.suspected_double_effects_since(timestamptz),
    ledger.exposure_since(timestamptz),
    ledger.open_states_at(timestamptz),
    ledger.overdue_pending_at(timestamptz),
    ledger.unknown_outcomes_at(timestamptz),
    ledger.duplicate_attempts_at(timestamptz),
    ledger.held_conflicts_at(timestamptz),
    ledger.pane_counts_at(timestamptz),
    ledger.pane_entries(timestamptz, timestamptz, text, text)
    to effect_operator, effect_readonly;
