-- For incident responders: what entered each pane over a range of time.

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
                 where ledger.counts_as_duplicate(a.kind)
                   and a.at >= pane_entries.since and a.at < pane_entries.until) recent
         cross join lateral (
                select recent.effect_id, min(a.at) as first_seen from ledger.attempts a
                 where a.effect_id = recent.effect_id
                   and ledger.counts_as_duplicate(a.kind)) f
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
