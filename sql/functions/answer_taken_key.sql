-- A key that has an effect is answered by that effect, which open_effect
-- holds locked (after the target's lock). Another intent under the key is
-- rejected, and kept flagged on the effect: the amount, currency, provider
-- and range are as material as the params, so a retry that changes any of
-- them is another intent. The same intent is answered by the effect's
-- state: a success is replayed, an open effect is in flight
-- (answer_open_key), a held one still held, a failed one retried or
-- stopped (answer_failed_key), a compensated or cancelled one stopped.
create or replace function ledger.answer_taken_key(
    existing     ledger.effects,
    policy       ledger.action_policies,
    action       text,
    target       text,
    amount_minor bigint,
    currency     text,
    provider     text,
    during       tstzrange,
    requested_by text,
    request_id   text,
    offered_hash text,
    offered_params jsonb
) returns ledger.begin_answer
language plpgsql
as $$
#variable_conflict use_column
begin
    if existing.params_hash <> answer_taken_key.offered_hash
       or existing.action <> answer_taken_key.action
       or existing.target <> answer_taken_key.target
       or existing.amount_minor is distinct from answer_taken_key.amount_minor
       or existing.currency is distinct from upper(answer_taken_key.currency)
       or existing.provider is distinct from answer_taken_key.provider
       or existing.during is distinct from answer_taken_key.during then
        perform ledger.record_attempt(existing, 'mismatch', answer_taken_key.requested_by,
            answer_taken_key.request_id, answer_taken_key.offered_hash, answer_taken_key.offered_params,
            jsonb_build_object('action', answer_taken_key.action, 'target', answer_taken_key.target,
                               'amount_minor', answer_taken_key.amount_minor,
                               'currency', upper(answer_taken_key.currency),
                               'provider', answer_taken_key.provider,
                               'during', answer_taken_key.during::text),
            true);
        return ('rejected'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
    end if;

    case existing.state
    when 'succeeded' then
        perform ledger.record_attempt(existing, 'replay', answer_taken_key.requested_by,
            answer_taken_key.request_id, answer_taken_key.offered_hash);
        return ('replay'::text, existing.id, existing.state, existing.result)::ledger.begin_answer;
    when 'pending', 'unknown' then
        return ledger.answer_open_key(existing, answer_taken_key.requested_by, answer_taken_key.request_id,
                                      answer_taken_key.offered_hash);
    when 'held' then
        perform ledger.record_attempt(existing, 'held', answer_taken_key.requested_by,
            answer_taken_key.request_id, answer_taken_key.offered_hash);
        return ('held'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
    when 'failed' then
        return ledger.answer_failed_key(existing, answer_taken_key.policy, answer_taken_key.requested_by,
                                        answer_taken_key.request_id, answer_taken_key.offered_hash,
                                        answer_taken_key.offered_params);
    else
        -- compensated or cancelled: the intent is closed for good.
        perform ledger.record_attempt(existing, 'stop', answer_taken_key.requested_by,
            answer_taken_key.request_id, answer_taken_key.offered_hash);
        return ('stop'::text, existing.id, existing.state, existing.result)::ledger.begin_answer;
    end case;
end
$$;

revoke all on function ledger.answer_taken_key(ledger.effects,ledger.action_policies,text,text,bigint,text,text,tstzrange,text,text,text,jsonb) from public;
