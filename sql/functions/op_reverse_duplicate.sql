-- A duplicate at the provider: the action happened more than once under
-- one key. The reconciliation that found it recorded the first record as the
-- effect (its reference); each other record it found is reversed by a
-- compensation of its own, sent under its own key with that record as the
-- reference to reverse, which leaves the effect itself standing. Above the
-- action's approval limit it is a request a second operator approves
-- (ledger.op_approve_compensation), as a compensation is. Repeated calls for
-- one record get its reversal, or the request, back.
create or replace function ledger.op_reverse_duplicate(
    op_key text, expected_version bigint, operator text, reason text, duplicate_ref text
) returns table (status text, compensation_key text, compensation_state text, dispatched boolean,
                 amount_minor bigint, currency text, approval_limit_minor bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect   ledger.effects;
    existing ledger.effects;
    created  ledger.effects;
    request  ledger.compensation_requests;
    approval record;
    seq      bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_reverse_duplicate.op_key, op_reverse_duplicate.expected_version,
                                       op_reverse_duplicate.operator, op_reverse_duplicate.reason, true);
    select c.* into existing from ledger.effects c
     where c.compensates = effect.id
       and c.params ->> 'reverses_duplicate' = op_reverse_duplicate.duplicate_ref
       and ledger.compensation_in_play(c)
     order by c.id desc limit 1;
    if existing.id is not null then
        return query select 'existing'::text, existing.op_key, existing.state,
                            existing.dispatched_at is not null, existing.amount_minor,
                            existing.currency, null::bigint, null::bigint;
        return;
    end if;
    select r.* into request from ledger.compensation_requests r
     where r.effect_id = effect.id and r.state = 'awaiting_approval';
    if found then
        if request.duplicate_ref is distinct from op_reverse_duplicate.duplicate_ref then
            raise exception 'ledger: a request about % already waits for approval: decide it first', effect.op_key
                using errcode = 'EW422';
        end if;
        return query select 'awaiting_approval'::text, null::text, null::text, false, request.amount_minor,
                            request.currency, request.approval_limit_minor, null::bigint;
        return;
    end if;
    if op_reverse_duplicate.duplicate_ref is not distinct from effect.external_ref then
        raise exception 'ledger: % is the reference of % itself, not a duplicate of it: compensate the effect instead',
            op_reverse_duplicate.duplicate_ref, effect.op_key
            using errcode = 'EW422';
    end if;
    if effect.state <> 'succeeded' or effect.attention is distinct from 'duplicate'
       or effect.compensates is not null then
        raise exception 'ledger: cannot reverse a duplicate of % (%): only a succeeded effect its provider holds twice has one',
            effect.op_key, effect.state
            using errcode = 'EW422';
    end if;
    -- Another effect's record is that effect's, whatever a reconciliation listed.
    if ledger.held_by_another_effect(effect, op_reverse_duplicate.duplicate_ref) then
        raise exception 'ledger: % is the reference of another effect, not a duplicate of %',
            op_reverse_duplicate.duplicate_ref, effect.op_key
            using errcode = 'EW422';
    end if;
    if not exists (select 1 from ledger.reconciliations r
                    where r.effect_id = effect.id and r.finding = 'duplicate'
                      and op_reverse_duplicate.duplicate_ref = any (r.external_refs)) then
        raise exception 'ledger: no reconciliation of % found % among its duplicates',
            effect.op_key, op_reverse_duplicate.duplicate_ref
            using errcode = 'EW422', hint = 'reconcile the effect first';
    end if;
    select a.limit_minor, a.waits into approval from ledger.compensation_approval(effect) a;
    if approval.waits then
        insert into ledger.compensation_requests (effect_id, op_key, state, amount_minor, currency,
                                                  approval_limit_minor, requested_by, reason, duplicate_ref)
        values (effect.id, effect.op_key, 'awaiting_approval', effect.amount_minor, effect.currency,
                approval.limit_minor, op_reverse_duplicate.operator, op_reverse_duplicate.reason,
                op_reverse_duplicate.duplicate_ref)
        returning * into request;
        seq := ledger.audit(op_reverse_duplicate.operator, 'reverse_duplicate_request', effect,
                            op_reverse_duplicate.reason, ledger.effect_snapshot(effect),
                            ledger.effect_snapshot(effect) || jsonb_build_object(
                                'duplicate_ref', op_reverse_duplicate.duplicate_ref,
                                'compensation', 'awaiting_approval', 'request_id', request.id,
                                'approval_limit_minor', approval.limit_minor));
        return query select 'awaiting_approval'::text, null::text, null::text, false, effect.amount_minor,
                            effect.currency, approval.limit_minor, seq;
        return;
    end if;
    created := ledger.create_compensation(effect, op_reverse_duplicate.operator, op_reverse_duplicate.operator,
                                          null, op_reverse_duplicate.duplicate_ref);
    insert into ledger.compensation_requests (effect_id, op_key, state, amount_minor, currency,
                                              requested_by, reason, compensation_id, compensation_key,
                                              duplicate_ref)
    values (effect.id, effect.op_key, 'created', effect.amount_minor, effect.currency,
            op_reverse_duplicate.operator, op_reverse_duplicate.reason, created.id, created.op_key,
            op_reverse_duplicate.duplicate_ref);
    seq := ledger.audit(op_reverse_duplicate.operator, 'reverse_duplicate', effect, op_reverse_duplicate.reason,
                        ledger.effect_snapshot(effect),
                        ledger.effect_snapshot(effect) || jsonb_build_object(
                            'duplicate_ref', op_reverse_duplicate.duplicate_ref,
                            'compensation_key', created.op_key, 'compensation_state', created.state));
    return query select 'created'::text, created.op_key, created.state, false, created.amount_minor,
                        created.currency, null::bigint, seq;
end
$$;

revoke all on function ledger.op_reverse_duplicate(text,bigint,text,text,text) from public;
grant execute on function ledger.op_reverse_duplicate(text,bigint,text,text,text) to effect_operator;
