-- Records the outcome the worker saw (see ledger.record_completion). A call
-- from a login that does not own the effect changes nothing: applied =
-- false and the reason in refused.
create or replace function ledger.complete_effect(
    op_key       text,
    outcome      text,
    external_ref text    default null,
    result       jsonb   default null,
    retryable    boolean default null,
    reason       text    default null,
    request_id   text    default null,
    worker       text    default null,
    error_class  text    default null,
    retry_after  interval default null,
    target       text    default null
) returns ledger.completion_answer
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    ignored       text;
    effect        ledger.effects;
    refusal       text;
    applied_state text;
begin
    ignored := ledger.forget_caller_settings();
    -- The common case, the owner's answer without an error class for an
    -- effect waiting for it, is found, checked and applied by one
    -- statement; anything else (a refusal, a repeat, a late result, an
    -- error class to interpret, an unknown key) takes the full path below.
    if complete_effect.error_class is null and complete_effect.outcome in ('succeeded', 'failed', 'unknown') then
        applied_state := ledger.apply_completion(complete_effect.op_key, true, complete_effect.target,
            complete_effect.outcome, complete_effect.external_ref, complete_effect.result,
            complete_effect.retryable, complete_effect.reason, complete_effect.request_id,
            complete_effect.worker, null, complete_effect.retry_after);
        if applied_state is not null then
            return (true, applied_state, false, null::text)::ledger.completion_answer;
        end if;
    end if;
    effect := ledger.effect_for_writer(complete_effect.op_key);
    refusal := coalesce(ledger.writer_refusal(effect, 'complete'),
                        ledger.target_refusal(effect, complete_effect.target));
    if refusal is not null then
        perform ledger.record_refusal(effect, 'complete_effect', refusal,
                                      complete_effect.worker, complete_effect.request_id);
        return (false, effect.state, false, refusal)::ledger.completion_answer;
    end if;
    return (select (c.applied, c.state, c.late, null::text)::ledger.completion_answer
              from ledger.record_completion(effect, complete_effect.outcome,
                                            complete_effect.external_ref, complete_effect.result,
                                            complete_effect.retryable, complete_effect.reason,
                                            complete_effect.request_id, complete_effect.worker,
                                            complete_effect.error_class, complete_effect.retry_after) c);
end
$$;

revoke all on function ledger.complete_effect(text,text,text,jsonb,boolean,text,text,text,text,interval,text) from public;
grant execute on function ledger.complete_effect(text,text,text,jsonb,boolean,text,text,text,text,interval,text) to effect_agent;
