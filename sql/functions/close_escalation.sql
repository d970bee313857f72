-- Closing the loop. Acknowledged: a person has it (delivery stops);
-- resolved: the decision was taken.
create or replace function ledger.close_escalation(
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

revoke all on function ledger.close_escalation(text,text,text,text) from public;
