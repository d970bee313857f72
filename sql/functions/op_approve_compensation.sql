-- Four-eyes: a second operator approves, and only then the compensation
-- effect exists. The names compared are the operator names the consoles
-- assert; give each person a database role of their own to make them proof.
create or replace function ledger.op_approve_compensation(
    op_key text, expected_version bigint, operator text, reason text
) returns table (status text, compensation_key text, compensation_state text, requested_by text,
                 duplicate_ref text, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect  ledger.effects;
    request ledger.compensation_requests;
    created ledger.effects;
    seq     bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_approve_compensation.op_key, op_approve_compensation.expected_version,
                                       op_approve_compensation.operator, op_approve_compensation.reason, true);
    select r.* into request from ledger.compensation_requests r
     where r.effect_id = effect.id and r.state = 'awaiting_approval'
       for update;
    if not found then
        raise exception 'ledger: no compensation of % is waiting for approval', effect.op_key
            using errcode = 'EW422';
    end if;
    -- Names are what the client asserts; a per-person login role is proof.
    -- A superuser (the demo, a break-glass session) can do anything anyway,
    -- so only the name is compared for one.
    if lower(btrim(request.requested_by)) = lower(btrim(op_approve_compensation.operator))
       or (request.requested_role = session_user::text
           and not (select r.rolsuper from pg_roles r where r.rolname = session_user)) then
        raise exception 'ledger: % (role %) requested this compensation of % and cannot also approve it',
            request.requested_by, request.requested_role, effect.op_key
            using errcode = 'EW422', hint = 'a second, different operator must approve';
    end if;
    if effect.state <> 'succeeded' then
        raise exception 'ledger: cannot approve the compensation of % in state %: reject the request',
            effect.op_key, effect.state
            using errcode = 'EW422';
    end if;
    created := ledger.create_compensation(effect, request.requested_by, op_approve_compensation.operator,
                                          'compensation_request:' || request.id, request.duplicate_ref);
    update ledger.compensation_requests r
       set state = 'created', decided_by = op_approve_compensation.operator, decided_role = session_user,
           decided_at = now(), decision_reason = op_approve_compensation.reason,
           compensation_id = created.id, compensation_key = created.op_key
     where r.id = request.id;
    seq := ledger.audit(op_approve_compensation.operator, 'approve', effect, op_approve_compensation.reason,
                        ledger.effect_snapshot(effect),
                        ledger.effect_snapshot(effect) || jsonb_build_object(
                            'request_id', request.id, 'requested_by', request.requested_by,
                            'duplicate_ref', request.duplicate_ref,
                            'compensation_key', created.op_key, 'compensation_state', created.state));
    return query select 'created'::text, created.op_key, created.state, request.requested_by,
                        request.duplicate_ref, seq;
end
$$;

revoke all on function ledger.op_approve_compensation(text,bigint,text,text) from public;
grant execute on function ledger.op_approve_compensation(text,bigint,text,text) to effect_operator;
