-- The same intent again while its effect is open (pending or unknown): in
-- flight, but for two calls that go ahead.
--   Released from its hold (by rule or by an operator) and never
--   dispatched: the first call after the release proceeds, as the held
--   call would have; one at a time, on the hold's row, so the calls after
--   it are in flight.
--   Unknown, under a safe_retry policy: the provider deduplicates by our
--   key, so an unknown outcome is settled by sending the same request
--   again, and the effect is pending once more.
-- Only its own login reopens an effect: another fleet's agent with the
-- same key is told it is in flight. The caller holds the effect's row lock.
create or replace function ledger.answer_open_key(
    existing ledger.effects, requested_by text, request_id text, offered_hash text
) returns ledger.begin_answer
language plpgsql
as $$
#variable_conflict use_column
begin
    if existing.state = 'pending' and existing.dispatched_at is null
       and ledger.writer_refusal(existing, 'dispatch') is null then
        update ledger.holds h set answered_at = now()
         where h.effect_id = existing.id and h.closed_how = 'released' and h.answered_at is null;
        if found then
            perform ledger.record_attempt(existing, 'released', answer_open_key.requested_by,
                answer_open_key.request_id, answer_open_key.offered_hash);
            return ('proceed'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
        end if;
    end if;
    if existing.state = 'unknown' and existing.attention is null
       and (ledger.policy_for(existing.action)).retry_semantics = 'safe_retry'
       and ledger.writer_refusal(existing, 'retry') is null then
        perform set_config('ledger.reason', 'safe retry of an unknown outcome under the same key', true);
        update ledger.effects e
           set state = 'pending', dispatched_at = null, dispatched_by = null,
               failure_reason = null, error_class = null,
               request_id = coalesce(answer_open_key.request_id, e.request_id),
               deadline_at = now() + e.pending_window
         where e.id = existing.id;
        perform ledger.record_attempt(existing, 'retry', answer_open_key.requested_by,
            answer_open_key.request_id, answer_open_key.offered_hash,
            detail => jsonb_build_object('safe_retry_of', 'unknown'));
        return ('retry'::text, existing.id, 'pending'::text, null::jsonb)::ledger.begin_answer;
    end if;
    perform ledger.record_attempt(existing, 'in_flight', answer_open_key.requested_by,
        answer_open_key.request_id, answer_open_key.offered_hash);
    return ('in_flight'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
end
$$;

revoke all on function ledger.answer_open_key(ledger.effects,text,text,text) from public;
