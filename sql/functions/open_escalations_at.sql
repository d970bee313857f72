create or replace function ledger.open_escalations_at(at_time timestamptz)
returns table (
    op_key text, escalation_id bigint, escalation_key text, effect_id bigint, sink text,
    decision_needed text, state text, delivery_attempts integer, last_error text, created_by text,
    created_at timestamptz, delivered_at timestamptz, acknowledged_by text, age interval,
    effect_version bigint)
language sql stable as $$
    select s.op_key, s.id, s.escalation_key, s.effect_id, s.sink, s.decision_needed, s.state,
           s.delivery_attempts, s.last_error, s.created_by, s.created_at, s.delivered_at,
           s.acknowledged_by, ledger.instant(at_time) - s.created_at, e.version
      from ledger.escalations_at(at_time) s
     cross join lateral ledger.effect_at(s.effect_id, at_time) e
     where s.state <> 'resolved'
$$;

revoke all on function ledger.open_escalations_at(timestamp with time zone) from public;
grant execute on function ledger.open_escalations_at(timestamp with time zone) to effect_operator, effect_readonly;
