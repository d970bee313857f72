-- A note on the record; changes no state, so the version check is only a
-- guard against annotating something other than what the operator saw.
-- The effect is both before and after: its entry has no after.
create or replace function ledger.op_annotate(
    op_key text, expected_version bigint, operator text, note text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.operator_begin('annotate', op_annotate.op_key, op_annotate.expected_version,
                                    op_annotate.operator, op_annotate.note);
    return query select * from ledger.operator_finish('annotate', effect, effect,
                                                      op_annotate.operator, op_annotate.note);
end
$$;

revoke all on function ledger.op_annotate(text,bigint,text,text) from public;
grant execute on function ledger.op_annotate(text,bigint,text,text) to effect_operator;
