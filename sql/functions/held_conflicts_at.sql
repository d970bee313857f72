-- Held: not dispatched because another open effect on the target conflicts.
create or replace function ledger.held_conflicts_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, target text, action text, amount_minor bigint, currency text,
    requested_by text, held_since timestamptz, held_for interval, holder_op_key text,
    holder_effect_id bigint, holder_state text, holder_age interval, holder_amount_minor bigint,
    holder_currency text, version bigint, overlap_from timestamptz, overlap_to timestamptz)
language sql stable as $$
    -- For bookings (time ranges), the stretch of time the two contend for.
    select e.op_key, e.id, e.target, e.action, e.amount_minor, e.currency, e.requested_by,
           e.state_since, ledger.instant(at_time) - e.state_since,
           h.op_key, h.id, h.state, ledger.instant(at_time) - h.created_at,
           h.amount_minor, h.currency, e.version,
           lower(e.during * h.during), upper(e.during * h.during)
      from ledger.effects_at(at_time) e
     cross join lateral ledger.effect_at(e.held_by, at_time) h
     where e.state = 'held'
$$;

revoke all on function ledger.held_conflicts_at(timestamp with time zone) from public;
grant execute on function ledger.held_conflicts_at(timestamp with time zone) to effect_operator, effect_readonly;
