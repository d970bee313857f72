-- Moves the whole ledger some months into the past, as if it had been
-- written then (tests and benchmarks of retention; never the product):
-- every timestamp of every ledger table shifts by the months in the setting
-- effectwatch_test.age_months, rows move into the partition of their new
-- month, and the audit chain is re-hashed over the shifted times, so it
-- verifies as a chain written then would. Needs a superuser: the ledger's
-- triggers are off for the one transaction, and restored as they were.
do $$
declare
    shift interval := make_interval(months => current_setting('effectwatch_test.age_months')::integer);
    trig record;
    tbl record;
    cols text;
    entry record;
    prev text := repeat('0', 64);
begin
    create temp table aged_triggers on commit drop as
    select c.oid::regclass::text as tbl, t.tgname, t.tgenabled
      from pg_trigger t join pg_class c on c.oid = t.tgrelid
      join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'ledger' and not t.tgisinternal;
    for trig in select * from aged_triggers loop
        execute format('alter table %s disable trigger %I', trig.tbl, trig.tgname);
    end loop;
    for tbl in
        select c.oid::regclass::text as name, c.oid from pg_class c
          join pg_namespace n on n.oid = c.relnamespace
         where n.nspname = 'ledger' and c.relkind in ('r', 'p') and not c.relispartition
    loop
        select string_agg(format('%I = %I - $1', a.attname, a.attname), ', ') into cols
          from pg_attribute a
         where a.attrelid = tbl.oid and a.attnum > 0 and not a.attisdropped
           and a.atttypid = 'timestamptz'::regtype;
        if cols is not null then
            execute format('update %s set %s', tbl.name, cols) using shift;
        end if;
    end loop;
    for entry in select * from ledger.audit_log order by seq loop
        update ledger.audit_log a
           set prev_hash = prev,
               hash = ledger.audit_entry_hash(prev, a.seq, a.at, a.operator, a.db_role, a.action,
                                              a.effect_id, a.op_key, a.reason, a.before, a.after)
         where a.seq = entry.seq
        returning a.hash into prev;
    end loop;
    update ledger.audit_head h set seq = coalesce((select max(a.seq) from ledger.audit_log a), 0), hash = prev;
    for trig in select * from aged_triggers loop
        execute format('alter table %s %s trigger %I', trig.tbl,
                       case trig.tgenabled when 'A' then 'enable always' when 'D' then 'disable'
                                           when 'R' then 'enable replica' else 'enable' end,
                       trig.tgname);
    end loop;
end
$$
