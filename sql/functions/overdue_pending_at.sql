-- Pending past its deadline: the call was prepared or sent and no answer
-- came within the pending window.
create or replace function ledger.overdue_pending_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, amount_minor bigint, currency text,
    provider text, requested_by text, created_at timestamptz, dispatched_at timestamptz,
    dispatched boolean, deadline_at timestamptz, overdue_by interval, age interval, version bigint)
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, e.amount_minor, e.currency, e.provider, e.requested_by,
           e.created_at, e.dispatched_at, e.dispatched_at is not null, e.deadline_at,
           ledger.instant(at_time) - e.deadline_at, ledger.instant(at_time) - e.created_at, e.version
      from ledger.effects_at(at_time) e
     where e.state = 'pending'
       and e.deadline_at < ledger.instant(at_time)
$$;

revoke all on function ledger.overdue_pending_at(timestamp with time zone) from public;
grant execute on function ledger.overdue_pending_at(timestamp with time zone) to effect_operator, effect_readonly;
