-- An operator has looked at a key's repeated and flagged calls and settled
-- what they mean: they leave the duplicates pane (which keeps flagged ones
-- for good otherwise) and stay in the attempts, the history and reports.
-- Only a key the pane lists can be acknowledged; later calls show again.
create or replace function ledger.op_acknowledge_duplicates(
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
    before := ledger.operator_begin('acknowledge_duplicates', op_acknowledge_duplicates.op_key,
                                    op_acknowledge_duplicates.expected_version,
                                    op_acknowledge_duplicates.operator,
                                    op_acknowledge_duplicates.reason);
    update ledger.effects e set duplicates_acknowledged_at = now()
     where e.id = before.id
    returning e.* into after;
    return query select * from ledger.operator_finish('acknowledge_duplicates', before, after,
                                                      op_acknowledge_duplicates.operator,
                                                      op_acknowledge_duplicates.reason);
end
$$;

revoke all on function ledger.op_acknowledge_duplicates(text,bigint,text,text) from public;
grant execute on function ledger.op_acknowledge_duplicates(text,bigint,text,text) to effect_operator;
