-- A lease can start with the claim itself, at no extra round trip: the
-- clients and the gateway pass `heartbeat_lease` to mark_dispatched or
-- begin_and_dispatch, and their first beat is due a third of a lease
-- later — a call shorter than that never beats at all. Both functions gain
-- the defaulted parameter last: a caller naming its arguments is unchanged.
create or replace function ledger.check_lease(lease interval) returns void
language plpgsql immutable as $$
begin
    if lease is null or lease < interval '1 second' or lease > interval '1 hour' then
        raise exception 'ledger: a heartbeat lease is from 1 second to 1 hour, not %', coalesce(lease::text, 'null')
            using errcode = 'invalid_parameter_value';
    end if;
end
$$;

revoke all on function ledger.check_lease(interval) from public;
