create or replace function ledger.op_compensate(
    op_key text, expected_version bigint, operator text, reason text
) returns table (status text, compensation_key text, compensation_state text, dispatched boolean,
                 requested_by text, amount_minor bigint, currency text,
                 approval_limit_minor bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect      ledger.effects;
    existing    ledger.effects;
    request     ledger.compensation_requests;
    created     ledger.effects;
    limit_minor bigint;
    waits       boolean;
    seq         bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_compensate.op_key, op_compensate.expected_version,
                                       op_compensate.operator, op_compensate.reason, true);
    -- Callers of one effect queue on that lock; whoever comes second finds
    -- the first one's compensation or request and gets it back.
    existing := ledger.live_compensation(effect.id);
    if existing.id is not null then
        return query select 'existing'::text, existing.op_key, existing.state,
                            existing.dispatched_at is not null, existing.requested_by,
                            existing.amount_minor, existing.currency, null::bigint, null::bigint;
        return;
    end if;
    select r.* into request from ledger.compensation_requests r
     where r.effect_id = effect.id and r.state = 'awaiting_approval';
    if found then
        return query select 'awaiting_approval'::text, null::text, null::text, false, request.requested_by,
                            request.amount_minor, request.currency, request.approval_limit_minor,
                            null::bigint;
        return;
    end if;
    perform ledger.require_applicable(effect, 'compensate');

    select a.limit_minor, a.waits into limit_minor, waits
      from ledger.compensation_approval(effect) a;
    if waits then
        insert into ledger.compensation_requests (effect_id, op_key, state, amount_minor, currency,
                                                  approval_limit_minor, requested_by, reason)
        values (effect.id, effect.op_key, 'awaiting_approval', effect.amount_minor, effect.currency,
                limit_minor, op_compensate.operator, op_compensate.reason)
        returning * into request;
        seq := ledger.audit(op_compensate.operator, 'compensate_request', effect, op_compensate.reason,
                            ledger.effect_snapshot(effect),
                            ledger.effect_snapshot(effect) || jsonb_build_object(
                                'compensation', 'awaiting_approval', 'request_id', request.id,
                                'approval_limit_minor', limit_minor));
        return query select 'awaiting_approval'::text, null::text, null::text, false, op_compensate.operator,
                            effect.amount_minor, effect.currency, limit_minor, seq;
        return;
    end if;

    created := ledger.create_compensation(effect, op_compensate.operator, op_compensate.operator, null);
    insert into ledger.compensation_requests (effect_id, op_key, state, amount_minor, currency,
                                              requested_by, reason, compensation_id, compensation_key)
    values (effect.id, effect.op_key, 'created', effect.amount_minor, effect.currency,
            op_compensate.operator, op_compensate.reason, created.id, created.op_key);
    seq := ledger.audit(op_compensate.operator, 'compensate', effect, op_compensate.reason,
                        ledger.effect_snapshot(effect),
                        ledger.effect_snapshot(effect) || jsonb_build_object(
                            'compensation_key', created.op_key, 'compensation_state', created.state));
    return query select 'created'::text, created.op_key, created.state, false, op_compensate.operator,
                        created.amount_minor, created.currency, null::bigint, seq;
end
$$;

revoke all on function ledger.op_compensate(text,bigint,text,text) from public;
grant execute on function ledger.op_compensate(text,bigint,text,text) to effect_operator;
