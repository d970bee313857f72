-- Escalations: one per escalation key, delivered with backoff by leased
-- workers, acknowledged and resolved by operators.

create trigger escalation_deliveries_append_only
    before update or delete on ledger.escalation_deliveries
    for each row execute function ledger.reject_change();
create trigger escalation_deliveries_no_truncate
    before truncate on ledger.escalation_deliveries
    for each statement execute function ledger.reject_change();
alter table ledger.escalation_deliveries enable always trigger escalation_deliveries_append_only;
alter table ledger.escalation_deliveries enable always trigger escalation_deliveries_no_truncate;

-- The decision a person must take about an effect as it is now: a stable
-- code (part of the escalation key) and the sentence a reviewer reads.
create function ledger.decision_needed(effect ledger.effects, out code text, out description text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if exists (select 1 from ledger.compensation_requests r
                where r.effect_id = (effect).id and r.state = 'awaiting_approval') then
        code := 'approve_compensation';
        description := 'A compensation of this effect waits for a second operator: approve or reject it';
    elsif (effect).attention = 'duplicate' then
        code := 'duplicate';
        description := 'The provider holds this effect more than once: compensate the extra one or accept it';
    elsif (effect).attention = 'mismatch' then
        code := 'mismatch';
        description := 'The provider''s effect differs from the ledger''s: correct it, compensate or accept it';
    elsif (effect).state = 'unknown' then
        code := 'unknown_outcome';
        description := 'Nobody can prove whether this effect happened: reconcile it or resolve it with evidence';
    elsif (effect).state = 'pending' and (effect).deadline_at < now() then
        code := 'overdue';
        description := 'No answer past its deadline: reconcile it or resolve it with evidence';
    elsif (effect).state = 'held' then
        code := 'held';
        description := 'Held behind another effect on the same target: release it or cancel it';
    elsif (effect).late_result_at is not null then
        code := 'late_result';
        description := 'A result arrived after the effect was settled another way: check which one is true';
    elsif (effect).state = 'failed' and coalesce((effect).retryable, false) then
        code := 'failed_retryable';
        description := 'Failed, and may be retried under the same key: let the agent retry, or close the matter';
    elsif (effect).state = 'failed' then
        code := 'failed';
        description := 'Failed for good: decide whether the business action needs another way';
    else
        code := 'review';
        description := 'Review this effect';
    end if;
end
$$;

-- An escalation carries the decision, the key, the ledger entry and the
-- evidence (the latest reconciliations), never the raw log. One per key:
-- escalate:<op_key>:<decision>, so escalating the same decision again
-- returns the open one; once resolved, a new one gets :2, :3…
create function ledger.op_escalate(
    op_key text, expected_version bigint, operator text, reason text, sink text
) returns table (status text, escalation_key text, state text, sink_name text, decision text,
                 decision_needed text, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect    ledger.effects;
    existing  ledger.escalations;
    needed    record;
    n         integer;
    key       text;
    recent    jsonb;
    body      jsonb;
    created   ledger.escalations;
    seq       bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_escalate.op_key, op_escalate.expected_version,
                                       op_escalate.operator, op_escalate.reason, true);
    if coalesce(btrim(op_escalate.sink), '') = '' then
        raise exception 'ledger: an escalation needs a sink to go to' using errcode = 'invalid_parameter_value';
    end if;
    select d.code, d.description into needed from ledger.decision_needed(effect) d;
    select s.* into existing from ledger.escalations s
     where s.effect_id = effect.id and s.decision = needed.code and s.state <> 'resolved'
     order by s.id desc limit 1;
    if found then
        perform ledger.close_next_step(effect.id, 'escalate', op_escalate.operator,
                                       'already escalated as ' || existing.escalation_key);
        return query select 'existing'::text, existing.escalation_key, existing.state, existing.sink,
                            existing.decision, existing.decision_needed, null::bigint;
        return;
    end if;
    select 1 + count(*) into n from ledger.escalations s
     where s.effect_id = effect.id and s.decision = needed.code;
    key := 'escalate:' || effect.op_key || ':' || needed.code || case when n > 1 then ':' || n else '' end;

    select coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
               'at', r.at, 'provider', r.provider, 'finding', r.finding,
               'external_refs', r.external_refs, 'evidence', r.evidence,
               'state_before', r.state_before, 'state_after', r.state_after)) order by r.at desc), '[]'::jsonb)
      into recent
      from (select * from ledger.reconciliations r
             where r.effect_id = effect.id order by r.at desc limit 3) r;
    body := jsonb_build_object(
        'escalation_key', key,
        'decision', needed.code,
        'decision_needed', needed.description,
        'reason', op_escalate.reason,
        'escalated_by', op_escalate.operator,
        'escalated_at', now(),
        'effect', jsonb_strip_nulls(jsonb_build_object(
            'op_key', effect.op_key, 'action', effect.action, 'target', effect.target,
            'state', effect.state, 'version', effect.version,
            'amount_minor', effect.amount_minor, 'currency', effect.currency,
            'provider', effect.provider, 'requested_by', effect.requested_by,
            'external_ref', effect.external_ref, 'attention', effect.attention,
            'failure_reason', effect.failure_reason, 'retryable', effect.retryable,
            'created_at', effect.created_at, 'dispatched_at', effect.dispatched_at,
            'deadline_at', effect.deadline_at, 'late_result_at', effect.late_result_at)),
        'evidence', recent,
        'attempts', (select jsonb_build_object('total', count(*), 'flagged', count(*) filter (where a.flagged))
                       from ledger.attempts a where a.effect_id = effect.id));
    insert into ledger.escalations as s (escalation_key, effect_id, op_key, sink, decision, decision_needed,
                                         payload, created_by)
    values (key, effect.id, effect.op_key, btrim(op_escalate.sink), needed.code, needed.description,
            body, op_escalate.operator)
    returning s.* into created;
    -- Telling a person was the step owed; delivering is the escalation's
    -- own (leased, retried with backoff) from here on.
    perform ledger.close_next_step(effect.id, 'escalate', op_escalate.operator, 'escalated as ' || key);
    seq := ledger.audit(op_escalate.operator, 'escalate', effect, op_escalate.reason,
                        ledger.effect_snapshot(effect),
                        ledger.effect_snapshot(effect) || jsonb_build_object(
                            'escalation_key', key, 'sink', created.sink, 'decision', needed.code));
    return query select 'created'::text, created.escalation_key, created.state, created.sink,
                        created.decision, created.decision_needed, seq;
end
$$;

-- Delivery: a worker claims due escalations for a lease (skipping those
-- another console is delivering), delivers, and records the outcome. The
-- lease makes two consoles deliver one escalation at most once between
-- them while both live; after a crash the lease runs out and delivery is
-- retried, with the escalation key as the sink's dedup key.
create function ledger.claim_due_escalations(
    worker text, lease interval default interval '60 seconds', max_items integer default 20,
    only_key text default null
) returns table (escalation_key text, sink text, payload jsonb, attempt integer)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    perform ledger.forget_caller_settings();
    if coalesce(btrim(worker), '') = '' then
        raise exception 'ledger: a worker name is required' using errcode = 'invalid_parameter_value';
    end if;
    return query
    with due as (
        select s.id from ledger.escalations s
         where s.state in ('open', 'failed')
           and s.next_attempt_at <= now()
           and (claim_due_escalations.only_key is null or s.escalation_key = claim_due_escalations.only_key)
         order by s.next_attempt_at, s.id
         limit greatest(coalesce(claim_due_escalations.max_items, 20), 1)
           for update skip locked)
    update ledger.escalations s
       set delivery_attempts = s.delivery_attempts + 1,
           next_attempt_at = now() + coalesce(claim_due_escalations.lease, interval '60 seconds'),
           updated_at = now()
      from due
     where s.id = due.id
    returning s.escalation_key, s.sink, s.payload, s.delivery_attempts;
end
$$;

-- A success marks the escalation delivered whichever claim it came from (it
-- was delivered); a failure counts only for the current claim, and sets the
-- next attempt after the backoff the worker computed.
create function ledger.record_escalation_delivery(
    escalation_key text, attempt integer, worker text, ok boolean,
    error text default null, retry_after interval default interval '30 seconds',
    duration_ms integer default null
) returns table (state text, delivery_attempts integer, next_attempt_at timestamptz)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    escalation ledger.escalations;
begin
    perform ledger.forget_caller_settings();
    select s.* into escalation from ledger.escalations s
     where s.escalation_key = record_escalation_delivery.escalation_key
       for update;
    if not found then
        raise exception 'ledger: no escalation with key %', record_escalation_delivery.escalation_key
            using errcode = 'EW404';
    end if;
    insert into ledger.escalation_deliveries (escalation_id, attempt, worker, ok, error, duration_ms)
    values (escalation.id, record_escalation_delivery.attempt, record_escalation_delivery.worker,
            record_escalation_delivery.ok, left(record_escalation_delivery.error, 1000),
            record_escalation_delivery.duration_ms);
    if escalation.state in ('open', 'failed') then
        if record_escalation_delivery.ok then
            update ledger.escalations s
               set state = 'delivered', delivered_at = now(), last_error = null, updated_at = now()
             where s.id = escalation.id
            returning s.* into escalation;
        elsif escalation.delivery_attempts = record_escalation_delivery.attempt then
            update ledger.escalations s
               set state = 'failed', last_error = left(record_escalation_delivery.error, 1000),
                   next_attempt_at = now() + greatest(coalesce(record_escalation_delivery.retry_after,
                                                               interval '30 seconds'), interval '0'),
                   updated_at = now()
             where s.id = escalation.id
            returning s.* into escalation;
        end if;
    end if;
    return query select escalation.state, escalation.delivery_attempts, escalation.next_attempt_at;
end
$$;

-- Closing the loop. Acknowledged: a person has it (delivery stops);
-- resolved: the decision was taken.
create function ledger.close_escalation(
    escalation_key text, operator text, reason text, new_state text
) returns table (status text, state text, op_key text, sink text, audit_seq bigint)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    escalation ledger.escalations;
    effect     ledger.effects;
    before     jsonb;
    seq        bigint;
begin
    if coalesce(btrim(close_escalation.operator), '') = '' then
        raise exception 'ledger: an operator name is required' using errcode = 'invalid_parameter_value';
    end if;
    if coalesce(btrim(close_escalation.reason), '') = '' then
        raise exception 'ledger: a reason is required to % an escalation', close_escalation.new_state
            using errcode = 'invalid_parameter_value';
    end if;
    select s.* into escalation from ledger.escalations s
     where s.escalation_key = close_escalation.escalation_key
       for update;
    if not found then
        raise exception 'ledger: no escalation with key %', close_escalation.escalation_key
            using errcode = 'EW404';
    end if;
    select e.* into effect from ledger.effects e where e.id = escalation.effect_id;
    if escalation.state = close_escalation.new_state then
        return query select 'unchanged'::text, escalation.state, escalation.op_key, escalation.sink, null::bigint;
        return;
    end if;
    if escalation.state = 'resolved' then
        raise exception 'ledger: escalation % is already resolved', escalation.escalation_key
            using errcode = 'EW422';
    end if;
    perform set_config('ledger.actor', close_escalation.operator, true);
    before := jsonb_build_object('escalation_key', escalation.escalation_key, 'state', escalation.state);
    if close_escalation.new_state = 'acknowledged' then
        update ledger.escalations s
           set state = 'acknowledged', acknowledged_at = now(), acknowledged_by = close_escalation.operator,
               updated_at = now()
         where s.id = escalation.id returning s.* into escalation;
    else
        update ledger.escalations s
           set state = 'resolved', resolved_at = now(), resolved_by = close_escalation.operator,
               updated_at = now()
         where s.id = escalation.id returning s.* into escalation;
    end if;
    seq := ledger.audit(close_escalation.operator,
                        case close_escalation.new_state when 'acknowledged' then 'acknowledge_escalation'
                                                        else 'resolve_escalation' end,
                        effect, close_escalation.reason, before,
                        jsonb_build_object('escalation_key', escalation.escalation_key, 'state', escalation.state));
    return query select 'changed'::text, escalation.state, escalation.op_key, escalation.sink, seq;
end
$$;

create function ledger.op_acknowledge_escalation(escalation_key text, operator text, reason text)
returns table (status text, state text, op_key text, sink text, audit_seq bigint)
language sql security definer
set search_path = pg_catalog, pg_temp
as $$
    select ledger.forget_caller_settings();
    select * from ledger.close_escalation($1, $2, $3, 'acknowledged')
$$;

create function ledger.op_resolve_escalation(escalation_key text, operator text, reason text)
returns table (status text, state text, op_key text, sink text, audit_seq bigint)
language sql security definer
set search_path = pg_catalog, pg_temp
as $$
    select ledger.forget_caller_settings();
    select * from ledger.close_escalation($1, $2, $3, 'resolved')
$$;
