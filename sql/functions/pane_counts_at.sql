-- How many items each pane holds at T (null: now). The duplicates pane
-- counts the keys that need a look; a 'replays' row counts the keys the
-- ledger answered by itself.
create or replace function ledger.pane_counts_at(at_time timestamptz)
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

revoke all on function ledger.pane_counts_at(timestamp with time zone) from public;
grant execute on function ledger.pane_counts_at(timestamp with time zone) to effect_operator, effect_readonly;
