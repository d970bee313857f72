-- Escalations and compensation requests keep each version whole.
create or replace function ledger.keep_row_version() returns trigger
language plpgsql as $$
begin
    insert into ledger.row_versions (relname, row_id, at, image)
    values (tg_table_name, new.id, new.updated_at, to_jsonb(new));
    return null;
end
$$;

revoke all on function ledger.keep_row_version() from public;
