-- The writer API, after begin_effect: claiming the dispatch and recording
-- the outcome, each only for the login that owns the effect (0004).

-- Whether the login is a superuser (SET ROLE aside): its own function, so
-- that writer_refusal has no query in it and is inlined into its callers'
-- expressions, where a function call of its own costs every writer call.
create function ledger.session_is_superuser() returns boolean
language sql stable as $$
    select coalesce((select r.rolsuper from pg_catalog.pg_roles r where r.rolname = session_user), false)
$$;

-- Why a writer call on an existing effect is refused, or null. An effect
-- belongs to the login role that created it: another login (another fleet,
-- or an agent forging a worker name) may not dispatch or complete it. A
-- compensation belongs to the operator path, whoever asks. A superuser
-- session is break-glass and may do anything anyway.
create function ledger.writer_refusal(effect ledger.effects, call text) returns text
language sql stable as $$
    select case
        when (effect).compensates is not null or (effect).op_key ~* '^(compensate|escalate):'
            then format('%s is a compensation: only the operator path (ledger.op_dispatch_compensation, '
                        'ledger.op_complete_compensation) may %s it', (effect).op_key, call)
        -- The owner's own call, every call of the hot path, is answered
        -- before the catalog is read.
        when (effect).owner_role = session_user::text then null
        when not ledger.session_is_superuser()
            then format('effect %s belongs to login role %s; login role %s may not %s it',
                        (effect).op_key, (effect).owner_role, session_user, call)
    end
$$;

-- Why a writer call that names its effect's target is refused, or null.
-- On a ledger distributed by target (docs/scale.md) the target routes the
-- call; writers may pass it now, and a key answered on another target is a
-- writer's mistake (or two writers sharing a key) that must not settle
-- what it did not mean.
create function ledger.target_refusal(effect ledger.effects, target text) returns text
language sql stable as $$
    select case when target is not null and target is distinct from (effect).target
                then format('effect %s is on target %s, not %s', (effect).op_key, (effect).target, target) end
$$;

-- A refused writer call changes nothing but is kept, flagged, so an
-- operator sees who tried to settle what is not theirs.
create function ledger.record_refusal(
    effect ledger.effects, call text, refusal text, worker text, request_id text
) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform ledger.record_attempt(effect, 'refused', worker, request_id, null,
        detail => jsonb_build_object('call', call, 'login', session_user::text,
                                     'owner_role', (effect).owner_role, 'refused', refusal),
        flagged => true);
    raise warning 'ledger: refused: %', refusal;
end
$$;

create function ledger.effect_for_writer(op_key text) returns ledger.effects
language plpgsql
as $$
declare
    effect ledger.effects;
begin
    select e.* into effect from ledger.effects e
     where e.op_key = effect_for_writer.op_key for update;
    if not found then
        raise exception 'ledger: no effect with key %', effect_for_writer.op_key
            using errcode = 'no_data_found', hint = 'call ledger.begin_effect first';
    end if;
    return effect;
end
$$;

-- Claims a locked effect for dispatch: the agent's mark_dispatched and the
-- operator's op_dispatch_compensation both end here. Not granted to anyone.
create function ledger.claim_dispatch(effect ledger.effects, request_id text, worker text)
returns table (claimed boolean, state text, deadline_at timestamptz)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    ignored text;
begin
    -- Plain expressions and RETURN NEXT on the path every effect takes (0004).
    ignored := set_config('ledger.actor', coalesce(claim_dispatch.worker, effect.requested_by), true);

    if effect.state = 'pending' and effect.dispatched_at is null then
        update ledger.effects e
           set dispatched_at = now(), dispatched_by = claim_dispatch.worker,
               dispatched_role = session_user,
               request_id = coalesce(claim_dispatch.request_id, e.request_id),
               deadline_at = now() + e.pending_window
         where e.id = effect.id
        returning e.* into effect;
        perform ledger.record_attempt(effect, 'dispatch', claim_dispatch.worker,
            claim_dispatch.request_id, null);
        claimed := true;
        state := effect.state;
        deadline_at := effect.deadline_at;
        return next;
    else
        perform ledger.record_attempt(effect, 'dispatch_refused', claim_dispatch.worker,
            claim_dispatch.request_id, null,
            detail => jsonb_build_object('state', effect.state,
                                         'already_dispatched_at', effect.dispatched_at));
        return query select false, effect.state, effect.deadline_at;
    end if;
end
$$;

-- Claims a pending effect for dispatch. Exactly one caller gets claimed =
-- true; everyone else must not call the provider. A call from a login that
-- does not own the effect gets claimed = false and the reason in refused.
create function ledger.mark_dispatched(
    op_key     text,
    request_id text default null,
    worker     text default null,
    target     text default null
) returns table (claimed boolean, state text, deadline_at timestamptz, refused text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    ignored  text;
    effect   ledger.effects;
    refusal  text;
    approval ledger.approvals;
    lapse    text;
begin
    ignored := ledger.forget_caller_settings();
    effect := ledger.effect_for_writer(mark_dispatched.op_key);
    refusal := coalesce(ledger.writer_refusal(effect, 'dispatch'),
                        ledger.target_refusal(effect, mark_dispatched.target));
    if refusal is not null then
        perform ledger.record_refusal(effect, 'mark_dispatched', refusal,
                                      mark_dispatched.worker, mark_dispatched.request_id);
        return query select false, effect.state, effect.deadline_at, refusal;
        return;
    end if;
    -- An approval that expired, was revoked or superseded since begin
    -- (between attempts, say) stops the dispatch: the effect is cancelled.
    if effect.approval_ref is not null and effect.state = 'pending' and effect.dispatched_at is null then
        approval := ledger.lock_approval(effect.approval_ref, effect.approval_version);
        lapse := ledger.approval_refusal(approval, effect.approval_ref, effect.approval_version, false,
                     effect.action, effect.target, effect.amount_minor, effect.currency,
                     effect.params_hash, effect.id);
        if lapse is not null then
            perform set_config('ledger.actor', coalesce(mark_dispatched.worker, effect.requested_by), true);
            perform set_config('ledger.reason', lapse || ': not dispatched', true);
            update ledger.effects e set state = 'cancelled', failure_reason = lapse
             where e.id = effect.id returning e.* into effect;
            perform ledger.record_attempt(effect, 'dispatch_refused', mark_dispatched.worker,
                mark_dispatched.request_id, null, detail => jsonb_build_object('approval', lapse),
                flagged => true);
            return query select false, effect.state, effect.deadline_at, lapse;
            return;
        end if;
    end if;
    return query select c.claimed, c.state, c.deadline_at, null::text
                   from ledger.claim_dispatch(effect, mark_dispatched.request_id, mark_dispatched.worker) c;
end
$$;

-- What an error class says of the outcome (the articles' rule): a timeout,
-- a reset, a 5xx or an unreadable answer means the effect may or may not
-- have happened: unknown, never failed. A business rejection is final for
-- these params; a rate limit is retryable under the same key after the
-- provider's delay. An outcome that contradicts its class is refused.
create function ledger.outcome_of_class(outcome text, error_class text) returns text
language plpgsql immutable as $$
declare
    implied text;
begin
    if error_class is null then
        return outcome;
    end if;
    implied := case
        when error_class in ('timeout', 'connection_reset', 'server_error', 'invalid_response') then 'unknown'
        when error_class in ('business_rejection', 'rate_limited') then 'failed'
    end;
    if implied is null then
        raise exception 'ledger: unknown error class % (timeout, connection_reset, server_error, invalid_response, business_rejection, rate_limited)',
            error_class using errcode = 'invalid_parameter_value';
    end if;
    if outcome is not null and outcome <> implied then
        raise exception 'ledger: a % means the outcome is %, not %', error_class, implied, outcome
            using errcode = 'invalid_parameter_value',
                  hint = case when implied = 'unknown'
                              then 'the provider may have acted: report unknown and let it be reconciled' end;
    end if;
    return implied;
end
$$;

-- What a completion said, kept with an attempt when it is not applied: a
-- repeat or a late result. Built only then, not on every completion.
create function ledger.completion_evidence(
    outcome text, external_ref text, result jsonb, retryable boolean, reason text, error_class text
) returns jsonb
language sql immutable as $$
    select jsonb_strip_nulls(jsonb_build_object(
        'outcome', outcome, 'external_ref', external_ref, 'result', result,
        'retryable', retryable, 'reason', reason, 'error_class', error_class))
$$;

-- What an applied completion writes: the one UPDATE behind record_completion
-- and behind the owner's common case in complete_effect. It applies only to
-- an effect still waiting for its answer (pending, or unknown and now
-- known) and, on a writer's call, only where writer_refusal and
-- target_refusal find nothing. Answers the new state, or null when no
-- effect qualified: the caller then takes its full path. The new version
-- records who completed it, when and why, and the row the outcome: an
-- attempt row would repeat both on every effect's hot path. Not granted to
-- anyone.
create function ledger.apply_completion(
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

-- Records the outcome seen for a locked effect: the agent's complete_effect
-- and the operator's op_complete_compensation both end here. A result for an
-- effect that was settled another way (reconciled, resolved, cancelled) is
-- kept as a flagged late result and never applied over the settled state.
-- Not granted to anyone.
create function ledger.record_completion(
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

-- What complete_effect answers: a named row type, so that its common case
-- is answered by one plain expression (as begin_effect's, 0004).
create type ledger.completion_answer as (applied boolean, state text, late boolean, refused text);

-- Records the outcome the worker saw (see ledger.record_completion). A call
-- from a login that does not own the effect changes nothing: applied =
-- false and the reason in refused.
create function ledger.complete_effect(
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
