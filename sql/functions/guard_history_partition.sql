-- Gives a partition its table's guards. Row triggers are cloned, but take
-- the default firing mode: the ledger's fire in every session mode (see
-- 0002). Statement triggers (TRUNCATE refused) are not cloned at all, and a
-- partition can be truncated by name: each gets its own.
create or replace function ledger.guard_history_partition(tbl text, part text) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    trig record;
begin
    for trig in
        select t.tgname, t.tgfoid::regproc::text as function_name, t.tgtype::integer & 1 = 1 as per_row
          from pg_trigger t
         where t.tgrelid = format('ledger.%I', tbl)::regclass and t.tgenabled = 'A' and not t.tgisinternal
    loop
        if not trig.per_row and not exists (
            select 1 from pg_trigger t
             where t.tgrelid = format('ledger.%I', part)::regclass and t.tgname = trig.tgname) then
            execute format('create trigger %I before truncate on ledger.%I for each statement execute function %s()',
                           trig.tgname, part, trig.function_name);
        end if;
        execute format('alter table ledger.%I enable always trigger %I', part, trig.tgname);
    end loop;
end
$$;

revoke all on function ledger.guard_history_partition(text,text) from public;
