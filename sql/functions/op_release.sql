create or replace function ledger.op_release(
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
    before := ledger.operator_begin('release', op_release.op_key, op_release.expected_version,
                                    op_release.operator, op_release.reason);
    begin
        update ledger.effects e
           set state = 'pending', held_by = null, deadline_at = now() + e.pending_window
         where e.id = before.id
        returning e.* into after;
    exception when exclusion_violation then
        raise exception 'ledger: % still overlaps a booking that is open or done: cancel it, or settle the other first',
            before.op_key using errcode = 'EW422';
    end;
    update ledger.holds h set closed_at = now(), closed_how = 'released', closed_by = op_release.operator
     where h.effect_id = after.id and h.closed_at is null;
    return query select * from ledger.operator_finish('release', before, after,
                                                      op_release.operator, op_release.reason);
end
$$;

revoke all on function ledger.op_release(text,bigint,text,text) from public;
grant execute on function ledger.op_release(text,bigint,text,text) to effect_operator;
