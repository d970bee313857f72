-- An escalation carries the decision, the key, the ledger entry and the
-- evidence (the latest reconciliations), never the raw log. One per key:
-- escalate:<op_key>:<decision>, so escalating the same decision again
-- returns the open one; once resolved, a new one gets :2, :3…
create or replace function ledger.op_escalate(
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

revoke all on function ledger.op_escalate(text,bigint,text,text,text) from public;
grant execute on function ledger.op_escalate(text,bigint,text,text,text) to effect_operator;
