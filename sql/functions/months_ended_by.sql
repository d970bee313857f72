-- The months made whose end has come by limit_at: what retention may drop.
create or replace function ledger.months_ended_by(limit_at timestamptz) returns setof date
language sql stable as $$
    select h.month from ledger.history_months h
     where ledger.month_start((h.month + interval '1 month')::date) <= limit_at
$$;

revoke all on function ledger.months_ended_by(timestamp with time zone) from public;
