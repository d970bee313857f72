-- Drops every month of history that ended by `boundary`, after carrying
-- into the kept partitions the rows of effects still in the ledger and the
-- audit entries that name an effect. Called by ledger.prune_settled after
-- it has removed the effects that go, in its transaction; the checkpoint
-- (signed by the caller over ledger.audit_checkpoint_due's message) is
-- required when audit entries go. Returns what went and what was kept.
-- Holds each history table exclusively from its first detach until commit:
-- writers wait that long, which is why the row-by-row work comes first.
create or replace function ledger.drop_history_months(
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

revoke all on function ledger.drop_history_months(timestamp with time zone,text,text,text,text) from public;
