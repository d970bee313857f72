create or replace function ledger.touch_updated_at() returns trigger
language plpgsql as $$
begin
    new.updated_at := now();
    return new;
end
$$;

revoke all on function ledger.touch_updated_at() from public;
