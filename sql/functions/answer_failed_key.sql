-- The same intent again after its effect failed. A failure the provider
-- did not call retryable is final: stop, with its result. A retryable one
-- is retried under the same key, pending once more, unless
--   the provider asked for a delay (rate limited): wait until it is over;
--   the call is another login's: only its own login reopens an effect;
--   under a time-range policy, a booking made since overlaps its range;
--   another effect has opened on its target since (under a time-range
--   policy: on an overlapping range): retrying now would make two open
--   effects, so it waits, held, as a new key would be.
-- The caller holds the effect's row lock, after the target's lock.
create or replace function ledger.answer_failed_key(
    existing ledger.effects, policy ledger.action_policies,
    requested_by text, request_id text, offered_hash text, offered_params jsonb
) returns ledger.begin_answer
language plpgsql
as $$
#variable_conflict use_column
declare
    refusal text;
    answer  ledger.begin_answer;
begin
    if not coalesce(existing.retryable, false) then
        perform ledger.record_attempt(existing, 'stop', answer_failed_key.requested_by,
            answer_failed_key.request_id, answer_failed_key.offered_hash);
        return ('stop'::text, existing.id, existing.state, existing.result)::ledger.begin_answer;
    end if;
    if existing.retry_not_before > now() then
        perform ledger.record_attempt(existing, 'wait', answer_failed_key.requested_by,
            answer_failed_key.request_id, answer_failed_key.offered_hash,
            detail => jsonb_build_object('retry_not_before', existing.retry_not_before));
        return ('wait'::text, existing.id, existing.state,
            jsonb_build_object('retry_after_seconds',
                ceil(extract(epoch from existing.retry_not_before - now()))::integer))::ledger.begin_answer;
    end if;
    refusal := ledger.writer_refusal(existing, 'retry');
    if refusal is not null then
        perform ledger.record_attempt(existing, 'refused', answer_failed_key.requested_by,
            answer_failed_key.request_id, answer_failed_key.offered_hash,
            detail => jsonb_build_object('refused', refusal), flagged => true);
        return ('rejected'::text, existing.id, existing.state,
            jsonb_build_object('refused', refusal))::ledger.begin_answer;
    end if;
    if policy.conflicts_by_time_range then
        answer := ledger.answer_double_booking(existing.op_key, existing.action, existing.target,
            existing.during, existing.id, answer_failed_key.requested_by, answer_failed_key.request_id,
            answer_failed_key.offered_hash, answer_failed_key.offered_params);
        if answer.decision is not null then
            return answer;
        end if;
    end if;
    if (policy.exclusive_per_target or policy.conflicts_by_time_range)
       and exists (select 1 from ledger.effects e
                    where e.target = existing.target and e.action = existing.action
                      and e.id <> existing.id
                      and e.state in ('pending', 'unknown', 'held')
                      and (not policy.conflicts_by_time_range
                           or e.during && existing.during)) then
        perform ledger.record_attempt(existing, 'held', answer_failed_key.requested_by,
            answer_failed_key.request_id, answer_failed_key.offered_hash,
            detail => jsonb_build_object('retry_blocked_by_open_effect_on_target', true));
        return ('held'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
    end if;
    perform set_config('ledger.reason', 'retry under the same key', true);
    update ledger.effects e
       set state = 'pending', dispatched_at = null, dispatched_by = null,
           failure_reason = null, retryable = null, error_class = null,
           retry_not_before = null,
           request_id = coalesce(answer_failed_key.request_id, e.request_id),
           deadline_at = now() + e.pending_window
     where e.id = existing.id;
    perform ledger.record_attempt(existing, 'retry', answer_failed_key.requested_by,
        answer_failed_key.request_id, answer_failed_key.offered_hash);
    return ('retry'::text, existing.id, 'pending'::text, null::jsonb)::ledger.begin_answer;
end
$$;

revoke all on function ledger.answer_failed_key(ledger.effects,ledger.action_policies,text,text,text,jsonb) from public;
