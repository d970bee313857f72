-- Makes the month partitions from the month of from_at through that of
-- through_at; returns how many months were made. Rows the kept partition
-- already holds for a new month (written before it existed) move into it.
create or replace function ledger.ensure_history_partitions(
    from_at timestamptz default now(), through_at timestamptz default now() + interval '2 months'
) returns integer
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    missing  date[];
    wanted   date;
    tbl      text;
    part     text;
    lower_at timestamptz;
    upper_at timestamptz;
    stray    boolean;
    made     integer := 0;
begin
    perform ledger.forget_caller_settings();
    missing := array(
        select m::date from generate_series(date_trunc('month', from_at at time zone 'UTC'),
                                            date_trunc('month', through_at at time zone 'UTC'),
                                            interval '1 month') m
         where not exists (select 1 from ledger.history_months h where h.month = m::date));
    -- The common case, every month there, takes no lock.
    if cardinality(missing) = 0 then
        return 0;
    end if;
    perform pg_advisory_xact_lock(hashtextextended('ledger.history_months', 0));
    foreach wanted in array missing loop
        -- Another caller may have made it while we waited for the lock.
        continue when exists (select 1 from ledger.history_months h where h.month = wanted);
        lower_at := ledger.month_start(wanted);
        upper_at := ledger.month_start((wanted + interval '1 month')::date);
        foreach tbl in array ledger.history_tables() loop
            part := format('%s_%s', tbl, to_char(wanted, 'YYYY_MM'));
            execute format('select exists (select 1 from ledger.%I where at >= $1 and at < $2)', tbl || '_kept')
               into stray using lower_at, upper_at;
            if not stray then
                execute format('create table ledger.%I partition of ledger.%I for values from (%L) to (%L)',
                               part, tbl, lower_at, upper_at);
            else
                -- Attaching a month checks that the kept partition holds
                -- nothing of it: carry those rows over first.
                perform set_config('ledger.history_move_xact', pg_current_xact_id()::text, true);
                execute format('create table ledger.%I (like ledger.%I including defaults including constraints)',
                               part, tbl);
                execute format('insert into ledger.%I select * from ledger.%I where at >= $1 and at < $2',
                               part, tbl || '_kept') using lower_at, upper_at;
                execute format('delete from ledger.%I where at >= $1 and at < $2', tbl || '_kept')
                  using lower_at, upper_at;
                execute format('alter table ledger.%I attach partition ledger.%I for values from (%L) to (%L)',
                               tbl, part, lower_at, upper_at);
                perform set_config('ledger.history_move_xact', '', true);
            end if;
            perform ledger.guard_history_partition(tbl, part);
        end loop;
        insert into ledger.history_months (month) values (wanted);
        made := made + 1;
    end loop;
    return made;
end
$$;

revoke all on function ledger.ensure_history_partitions(timestamp with time zone,timestamp with time zone) from public;
