-- Records the outcome seen for a locked effect: the agent's complete_effect
-- and the operator's op_complete_compensation both end here. A result for an
-- effect that was settled another way (reconciled, resolved, cancelled) is
-- kept as a flagged late result and never applied over the settled state.
-- Not granted to anyone.
create or replace function ledger.record_completion(
    effect ledger.effects, outcome text, external_ref text, result jsonb, retryable boolean,
    reason text, request_id text, worker text,
    error_class text default null, retry_after interval default null
) returns table (applied boolean, state text, late boolean)
language plpgsql
as $$
#variable_conflict use_column
declare
    evidence      jsonb;
    ignored       text;
    applied_state text;
begin
    if record_completion.error_class is not null then
        outcome := ledger.outcome_of_class(record_completion.outcome, record_completion.error_class);
    end if;
    if record_completion.error_class = 'business_rejection' then
        retryable := false;
    elsif record_completion.error_class = 'rate_limited' then
        retryable := true;
    end if;
    if record_completion.outcome not in ('succeeded', 'failed', 'unknown') or record_completion.outcome is null then
        raise exception 'ledger: outcome must be succeeded, failed or unknown (got %)', record_completion.outcome
            using errcode = 'invalid_parameter_value';
    end if;
    -- Plain expressions and RETURN NEXT on the path every effect takes (0004).
    ignored := set_config('ledger.actor', coalesce(record_completion.worker, effect.requested_by), true);
    ignored := set_config('ledger.reason', coalesce(record_completion.reason, ledger.default_reason(record_completion.outcome)), true);

    applied_state := ledger.apply_completion(effect.op_key, false, null, record_completion.outcome,
        record_completion.external_ref, record_completion.result, record_completion.retryable,
        record_completion.reason, record_completion.request_id, record_completion.worker,
        record_completion.error_class, record_completion.retry_after);
    if applied_state is not null then
        applied := true;
        state := applied_state;
        late := false;
        return next;
    elsif effect.state = record_completion.outcome
          and effect.external_ref is not distinct from coalesce(record_completion.external_ref, effect.external_ref) then
        -- The same answer delivered again (a retried completion): harmless.
        perform ledger.record_attempt(effect, 'completion_repeat', record_completion.worker,
            record_completion.request_id, null,
            detail => ledger.completion_evidence(record_completion.outcome, record_completion.external_ref,
                record_completion.result, record_completion.retryable, record_completion.reason,
                record_completion.error_class));
        return query select false, effect.state, false;
    else
        evidence := ledger.completion_evidence(record_completion.outcome, record_completion.external_ref,
            record_completion.result, record_completion.retryable, record_completion.reason,
            record_completion.error_class);
        -- A success reported after the effect was recorded as failed means
        -- the money did move: never let the key be retried, and flag it.
        update ledger.effects e
           set late_result_at = now(),
               retryable = case when e.state = 'failed' and record_completion.outcome = 'succeeded'
                                then false else e.retryable end,
               attention = case when e.state = 'failed' and record_completion.outcome = 'succeeded'
                                then 'mismatch' else e.attention end
         where e.id = effect.id;
        perform ledger.record_attempt(effect, 'late_result', record_completion.worker,
            record_completion.request_id, null,
            detail => evidence || jsonb_build_object('state_when_received', effect.state),
            flagged => true);
        return query select false, effect.state, true;
    end if;
end
$$;

revoke all on function ledger.record_completion(ledger.effects,text,text,jsonb,boolean,text,text,text,text,interval) from public;
