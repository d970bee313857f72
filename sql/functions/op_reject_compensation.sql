-- Turns a request down; the requester may withdraw their own.
create or replace function ledger.op_reject_compensation(
    op_key text, expected_version bigint, operator text, reason text
) returns table (status text, requested_by text, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect  ledger.effects;
    request ledger.compensation_requests;
    seq     bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_reject_compensation.op_key, op_reject_compensation.expected_version,
                                       op_reject_compensation.operator, op_reject_compensation.reason, true);
    select r.* into request from ledger.compensation_requests r
     where r.effect_id = effect.id and r.state = 'awaiting_approval'
       for update;
    if not found then
        raise exception 'ledger: no compensation of % is waiting for approval', effect.op_key
            using errcode = 'EW422';
    end if;
    update ledger.compensation_requests r
       set state = 'rejected', decided_by = op_reject_compensation.operator, decided_role = session_user,
           decided_at = now(), decision_reason = op_reject_compensation.reason
     where r.id = request.id;
    seq := ledger.audit(op_reject_compensation.operator, 'reject', effect, op_reject_compensation.reason,
                        ledger.effect_snapshot(effect),
                        ledger.effect_snapshot(effect) || jsonb_build_object(
                            'request_id', request.id, 'requested_by', request.requested_by,
                            'compensation', 'rejected'));
    return query select 'rejected'::text, request.requested_by, seq;
end
$$;

revoke all on function ledger.op_reject_compensation(text,bigint,text,text) from public;
grant execute on function ledger.op_reject_compensation(text,bigint,text,text) to effect_operator;
