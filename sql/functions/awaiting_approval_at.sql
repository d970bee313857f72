-- Compensations waiting for a second operator.
create or replace function ledger.awaiting_approval_at(at_time timestamptz)
returns table (
    op_key text, request_id bigint, effect_id bigint, action text, target text,
    amount_minor bigint, currency text, approval_limit_minor bigint, requested_by text,
    reason text, requested_at timestamptz, waiting_for interval, state text, version bigint)
language sql stable as $$
    select r.op_key, r.id, r.effect_id, e.action, e.target, r.amount_minor, r.currency,
           r.approval_limit_minor, r.requested_by, r.reason, r.created_at,
           ledger.instant(at_time) - r.created_at, e.state, e.version
      from ledger.compensation_requests_at(at_time) r
     cross join lateral ledger.effect_at(r.effect_id, at_time) e
     where r.state = 'awaiting_approval'
$$;

revoke all on function ledger.awaiting_approval_at(timestamp with time zone) from public;
grant execute on function ledger.awaiting_approval_at(timestamp with time zone) to effect_operator, effect_readonly;
