-- The same for the tombstones of pruned keys: never younger than 30 days.
create or replace function ledger.tombstone_cutoff(older_than interval) returns timestamptz
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if older_than is null or older_than < interval '30 days' then
        raise exception 'ledger: tombstones are kept at least 30 days (got %): a replay after that could proceed again',
            older_than
            using errcode = 'invalid_parameter_value';
    end if;
    return now() - older_than;
end
$$;

revoke all on function ledger.tombstone_cutoff(interval) from public;
