create or replace function ledger.op_cancel(
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
    before := ledger.operator_begin('cancel', op_cancel.op_key, op_cancel.expected_version,
                                    op_cancel.operator, op_cancel.reason);
    update ledger.effects e set state = 'cancelled' where e.id = before.id
    returning e.* into after;
    update ledger.holds h set closed_at = now(), closed_how = 'cancelled', closed_by = op_cancel.operator
     where h.effect_id = after.id and h.closed_at is null;
    return query select * from ledger.operator_finish('cancel', before, after,
                                                      op_cancel.operator, op_cancel.reason);
end
$$;

revoke all on function ledger.op_cancel(text,bigint,text,text) from public;
grant execute on function ledger.op_cancel(text,bigint,text,text) to effect_operator;
