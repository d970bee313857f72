create or replace function ledger.reject_change() returns trigger
language plpgsql as $$
begin
    raise exception 'ledger: % is append-only (% refused)', tg_table_schema || '.' || tg_table_name, tg_op
        using errcode = 'insufficient_privilege';
end
$$;

revoke all on function ledger.reject_change() from public;
