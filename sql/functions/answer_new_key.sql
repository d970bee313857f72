-- A new key's effect, just inserted by open_effect, answered when it is
-- not the plain case open_effect answers itself (pending, on the first
-- try). Refused by its approval, it is kept, cancelled: the key, who asked
-- and why it was refused are a fact of the ledger, and the key stays
-- closed (stop). Else the approval it names is consumed by it, and it is
-- held (the hold's row is written) or proceeds.
-- The first call is the effect row itself (requester, request id, params
-- hash) and its creation event: attempts record the calls that come
-- after, and an extra row per effect would cost every writer a fifth of
-- its throughput for no new fact.
create or replace function ledger.answer_new_key(
    created_id bigint, created_state text, holder_id bigint, created_target text,
    refusal text, approval ledger.approvals
) returns ledger.begin_answer
language plpgsql
as $$
#variable_conflict use_column
begin
    if answer_new_key.refusal is not null then
        perform set_config('ledger.reason', answer_new_key.refusal, true);
        update ledger.effects e set state = 'cancelled', failure_reason = answer_new_key.refusal
         where e.id = answer_new_key.created_id;
        return ('rejected'::text, answer_new_key.created_id, 'cancelled'::text,
                jsonb_build_object('refused', answer_new_key.refusal))::ledger.begin_answer;
    end if;
    if approval.approval_ref is not null then
        update ledger.approvals a set consumed_by = answer_new_key.created_id, consumed_at = now()
         where a.approval_ref = approval.approval_ref and a.version = approval.version;
    end if;
    if answer_new_key.created_state = 'held' then
        insert into ledger.holds (effect_id, holder_id, target)
        values (answer_new_key.created_id, answer_new_key.holder_id, answer_new_key.created_target);
        return ('held'::text, answer_new_key.created_id, answer_new_key.created_state, null::jsonb)::ledger.begin_answer;
    end if;
    return ('proceed'::text, answer_new_key.created_id, answer_new_key.created_state, null::jsonb)::ledger.begin_answer;
end
$$;

revoke all on function ledger.answer_new_key(bigint,text,bigint,text,text,ledger.approvals) from public;
