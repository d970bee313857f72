-- The instant a view is read at: T, or now for the live view.
create or replace function ledger.instant(at_time timestamptz) returns timestamptz
language sql stable parallel safe as $$
    select coalesce(at_time, now())
$$;

revoke all on function ledger.instant(timestamp with time zone) from public;
grant execute on function ledger.instant(timestamp with time zone) to effect_operator, effect_readonly;
