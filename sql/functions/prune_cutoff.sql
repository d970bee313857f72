-- The cutoff of a prune of what settled more than `older_than` ago, or
-- the refusal every prune (and its dry run) gives an age it does not take.
create or replace function ledger.prune_cutoff(older_than interval) returns timestamptz
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if older_than is null or older_than < interval '0' then
        raise exception 'ledger: prune needs an age of at least 0 (got %)', older_than
            using errcode = 'invalid_parameter_value';
    end if;
    return now() - older_than;
end
$$;

revoke all on function ledger.prune_cutoff(interval) from public;
