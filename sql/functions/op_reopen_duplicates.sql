-- The undo of an acknowledgement: the key's repeated and flagged calls show
-- on the duplicates pane again, as they did before it (the last day's
-- repeats, and every flagged one). Only an acknowledged key can be
-- reopened. Its history keeps both the acknowledgement and this.
create or replace function ledger.op_reopen_duplicates(
    op_key text, expected_version bigint, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before ledger.effects;
    after  ledger.effects;
begin
    perform ledger.forget_caller_settings();
    before := ledger.operator_begin('reopen_duplicates', op_reopen_duplicates.op_key,
                                    op_reopen_duplicates.expected_version,
                                    op_reopen_duplicates.operator,
                                    op_reopen_duplicates.reason);
    update ledger.effects e set duplicates_acknowledged_at = null
     where e.id = before.id
    returning e.* into after;
    return query select * from ledger.operator_finish('reopen_duplicates', before, after,
                                                      op_reopen_duplicates.operator,
                                                      op_reopen_duplicates.reason);
end
$$;

revoke all on function ledger.op_reopen_duplicates(text,bigint,text,text) from public;
grant execute on function ledger.op_reopen_duplicates(text,bigint,text,text) to effect_operator;
