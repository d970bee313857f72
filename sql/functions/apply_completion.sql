-- What an applied completion writes: the one UPDATE behind record_completion
-- and behind the owner's common case in complete_effect. It applies only to
-- an effect still waiting for its answer (pending, or unknown and now
-- known) and, on a writer's call, only where writer_refusal and
-- target_refusal find nothing. Answers the new state, or null when no
-- effect qualified: the caller then takes its full path. The new version
-- records who completed it, when and why, and the row the outcome: an
-- attempt row would repeat both on every effect's hot path. Not granted to
-- anyone.
create or replace function ledger.apply_completion(
    effect_key text, writer_call boolean, target text, outcome text, external_ref text,
    result jsonb, retryable boolean, reason text, request_id text, worker text,
    error_class text, retry_after interval
) returns text
language plpgsql as $$
#variable_conflict use_column
declare
    applied_state text;
    ignored       text;
begin
    update ledger.effects e
       set state = apply_completion.outcome,
           external_ref = coalesce(apply_completion.external_ref, e.external_ref),
           result = coalesce(apply_completion.result, e.result),
           retryable = case when apply_completion.outcome = 'failed'
                            then coalesce(apply_completion.retryable, false) end,
           failure_reason = case when apply_completion.outcome <> 'succeeded'
                                 then apply_completion.reason end,
           error_class = apply_completion.error_class,
           retry_not_before = case when apply_completion.error_class = 'rate_limited'
                                   then now() + coalesce(apply_completion.retry_after, interval '1 minute') end,
           request_id = coalesce(apply_completion.request_id, e.request_id)
     where e.op_key = apply_completion.effect_key
       -- A CASE, so that these are decided in this order and the actor and
       -- the reason are set only for the row that qualifies (a refused call
       -- leaves nothing set for the rest of its transaction): who answered
       -- (the worker, else the requester, known once the row is found) and
       -- why go into the version the guard keeps.
       and case when (e.state = 'pending' or (e.state = 'unknown' and apply_completion.outcome <> 'unknown'))
                     and (not apply_completion.writer_call
                          or (ledger.writer_refusal(e, 'complete') is null
                              and ledger.target_refusal(e, apply_completion.target) is null))
                then set_config('ledger.actor', coalesce(apply_completion.worker, e.requested_by), true) is not null
                     and set_config('ledger.reason', coalesce(apply_completion.reason,
                                                              ledger.default_reason(apply_completion.outcome)), true)
                         is not null
                else false end
    returning e.state into applied_state;
    return applied_state;
end
$$;

revoke all on function ledger.apply_completion(text,boolean,text,text,text,jsonb,boolean,text,text,text,text,interval) from public;
