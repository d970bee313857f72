create or replace function ledger.month_start(month date) returns timestamptz
language sql immutable as $$
    select month::timestamp at time zone 'UTC'
$$;

revoke all on function ledger.month_start(date) from public;
