-- The end of the newest month that has ended by limit_at: history before it
-- may be dropped by month. Null: no month has.
create or replace function ledger.history_drop_boundary(limit_at timestamptz) returns timestamptz
language sql stable as $$
    select ledger.month_start((max(m) + interval '1 month')::date) from ledger.months_ended_by(limit_at) m
$$;

revoke all on function ledger.history_drop_boundary(timestamp with time zone) from public;
