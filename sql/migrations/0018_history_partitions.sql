-- History by the month ---------------------------------------------------------
--
-- The four history tables (attempts, effect_versions, reconciliations,
-- audit_log) are partitioned by the month of `at`, in UTC, one partition per
-- month named <table>_YYYY_MM, plus the default partition <table>_kept. The
-- months exist ahead of time (ledger.ensure_history_partitions, called by
-- `effectwatch migrate`, by retention and by every reconciler pass); a row
-- written for a month that has none yet lands in the kept partition and is
-- moved into its month when that month is made, so nothing is refused or lost.
--
-- Retention (ledger.prune_settled) drops whole months instead of deleting
-- their rows. Before a month goes, every row of it that belongs to an effect
-- still in the ledger, and every audit entry naming an effect, is carried
-- into the kept partition unchanged: an effect that stays keeps its whole
-- history, so nothing open, unknown, compensated or acted on loses any of it.
-- The audit entries that go (those naming no effect) are vouched for by a
-- signed checkpoint of the chain's head (ledger.audit_checkpoints), from
-- which `audit verify` starts.

-- The months that have a partition in every history table.
create table ledger.history_months (
    month      date primary key check (month = date_trunc('month', month)::date),
    made_at    timestamptz not null default now()
);

create function ledger.history_tables() returns text[]
language sql immutable as $$
    select array['effect_versions', 'attempts', 'reconciliations', 'audit_log']
$$;

create function ledger.month_start(month date) returns timestamptz
language sql immutable as $$
    select month::timestamp at time zone 'UTC'
$$;

-- The months made whose end has come by limit_at: what retention may drop.
create function ledger.months_ended_by(limit_at timestamptz) returns setof date
language sql stable as $$
    select h.month from ledger.history_months h
     where ledger.month_start((h.month + interval '1 month')::date) <= limit_at
$$;

-- Gives a partition its table's guards. Row triggers are cloned, but take
-- the default firing mode: the ledger's fire in every session mode (see
-- 0002). Statement triggers (TRUNCATE refused) are not cloned at all, and a
-- partition can be truncated by name: each gets its own.
create function ledger.guard_history_partition(tbl text, part text) returns void
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

-- Makes the month partitions from the month of from_at through that of
-- through_at; returns how many months were made. Rows the kept partition
-- already holds for a new month (written before it existed) move into it.
create function ledger.ensure_history_partitions(
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

-- The end of the newest month that has ended by limit_at: history before it
-- may be dropped by month. Null: no month has.
create function ledger.history_drop_boundary(limit_at timestamptz) returns timestamptz
language sql stable as $$
    select ledger.month_start((max(m) + interval '1 month')::date) from ledger.months_ended_by(limit_at) m
$$;

-- The checkpoint that dropping the months ending by limit_at needs, with
-- the message to sign; no row when no audit entry would go (each month's
-- entries that name an effect are kept).
create function ledger.audit_checkpoint_due(limit_at timestamptz)
returns table (seq bigint, hash text, through timestamptz, kept_entries bigint, kept_digest text,
               message text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    boundary timestamptz := ledger.history_drop_boundary(limit_at);
    head     record;
    kept     record;
begin
    if boundary is null or not exists (
        select 1 from ledger.audit_log a
         where a.at < boundary and a.effect_id is null
           and a.tableoid <> 'ledger.audit_log_kept'::regclass) then
        return;
    end if;
    select a.seq, a.hash into head from ledger.audit_log a where a.at < boundary order by a.seq desc limit 1;
    select * into kept from ledger.audit_kept_digest(head.seq, boundary);
    return query select head.seq, head.hash, boundary, kept.entries, kept.digest,
                        ledger.audit_checkpoint_message(head.seq, head.hash, boundary, kept.entries, kept.digest);
end
$$;

-- Drops every month of history that ended by `boundary`, after carrying
-- into the kept partitions the rows of effects still in the ledger and the
-- audit entries that name an effect. Called by ledger.prune_settled after
-- it has removed the effects that go, in its transaction; the checkpoint
-- (signed by the caller over ledger.audit_checkpoint_due's message) is
-- required when audit entries go. Returns what went and what was kept.
-- Holds each history table exclusively from its first detach until commit:
-- writers wait that long, which is why the row-by-row work comes first.
create function ledger.drop_history_months(
    boundary timestamptz, operator text, checkpoint_message text, checkpoint_signature text,
    checkpoint_key text
) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    due       record;
    mark_seq  bigint;
    gone      date;
    tbl       text;
    part      text;
    total     bigint;
    carried   bigint;
    went      bigint;
    months    text[] := '{}';
    dropped   jsonb := '{}';
    kept      jsonb := '{}';
begin
    if boundary is null then
        return jsonb_build_object('months', months, 'dropped', dropped, 'kept', kept);
    end if;
    -- An entry being written now, stamped before the boundary, must be in
    -- the head that is vouched for: wait for the writers of the chain.
    perform pg_advisory_xact_lock(hashtextextended('ledger.audit_log', 0));
    select * into due from ledger.audit_checkpoint_due(boundary);
    if found then
        if checkpoint_signature is null or checkpoint_key is null then
            raise exception 'ledger: dropping audit history before % needs a signed checkpoint of the chain', boundary
                using errcode = 'invalid_parameter_value',
                      hint = 'effectwatch prune signs it with the key named by audit_signing_key';
        end if;
        if checkpoint_message is distinct from due.message then
            raise exception 'ledger: the checkpoint signed is not the head of the chain at % (the chain moved): nothing was pruned; run it again',
                boundary
                using errcode = 'serialization_failure';
        end if;
        insert into ledger.audit_checkpoints (seq, hash, through, kept_entries, kept_digest, message,
                                              signature, public_key, made_by)
        values (due.seq, due.hash, due.through, due.kept_entries, due.kept_digest, due.message,
                checkpoint_signature, checkpoint_key, operator);
        mark_seq := due.seq;
    end if;
    perform set_config('ledger.history_move_xact', pg_current_xact_id()::text, true);
    for gone in select m from ledger.months_ended_by(boundary) m order by m loop
        foreach tbl in array ledger.history_tables() loop
            part := format('%s_%s', tbl, to_char(gone, 'YYYY_MM'));
            execute format('alter table ledger.%I detach partition ledger.%I', tbl, part);
            execute format('select count(*) from ledger.%I', part) into total;
            if tbl = 'audit_log' then
                execute format('insert into ledger.audit_log select * from ledger.%I p where p.effect_id is not null',
                               part);
            else
                execute format('insert into ledger.%I overriding system value select * from ledger.%I p
                                 where exists (select 1 from ledger.effects e where e.id = p.effect_id)',
                               tbl, part);
            end if;
            get diagnostics carried = row_count;
            execute format('drop table ledger.%I', part);
            went := total - carried;
            if tbl = 'audit_log' then
                update ledger.audit_head set entries = entries - went;
            end if;
            dropped := jsonb_set(dropped, array[tbl],
                                 to_jsonb(coalesce((dropped ->> tbl)::bigint, 0) + went));
            kept := jsonb_set(kept, array[tbl], to_jsonb(coalesce((kept ->> tbl)::bigint, 0) + carried));
        end loop;
        delete from ledger.history_months h where h.month = gone;
        months := months || to_char(gone, 'YYYY-MM');
    end loop;
    perform set_config('ledger.history_move_xact', '', true);
    return jsonb_build_object('months', months, 'dropped', dropped, 'kept', kept,
                              'checkpoint_seq', mark_seq);
end
$$;

-- As in 0017: nothing here is anyone's but the owner's unless granted.
revoke execute on all functions in schema ledger from public;
revoke all on ledger.audit_head from public;
grant select on ledger.history_months, ledger.audit_checkpoints to effect_operator, effect_readonly;
grant execute on function ledger.audit_kept_digest(bigint, timestamptz), ledger.audit_entry_intact(ledger.audit_log), ledger.history_tables(),
    ledger.audit_checkpoint_message(bigint, text, timestamptz, bigint, text)
    to effect_readonly, effect_operator;

-- Made with the tables, before their triggers: guarded here.
select ledger.guard_history_partition(t, t || '_kept') from unnest(ledger.history_tables()) t;

-- What the reconciler and migrate call: this month and the two after it.
create function ledger.ensure_next_history_months() returns integer
language sql security definer
set search_path = pg_catalog, pg_temp
as $$
    select ledger.forget_caller_settings();
    select ledger.ensure_history_partitions(now(), now() + interval '2 months')
$$;
revoke execute on function ledger.ensure_next_history_months() from public;
grant execute on function ledger.ensure_next_history_months() to effect_operator;

select ledger.ensure_next_history_months();
