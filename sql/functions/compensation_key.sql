-- Keys stay within the 512 characters an op_key may have.
create or replace function ledger.compensation_key(op_key text, n integer) returns text
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select case when length(op_key) <= 480 then 'compensate:' || op_key || ':' || n
                else 'compensate:sha256:' || encode(sha256(convert_to(op_key, 'UTF8')), 'hex') || ':' || n
           end
$$;

revoke all on function ledger.compensation_key(text,integer) from public;
