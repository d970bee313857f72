-- The approval limit of the effect's action, and whether compensating the
-- effect now waits for a second operator (its amount is above the limit):
-- op_compensate decides by it, and the console says it before the operator
-- confirms.
create or replace function ledger.compensation_approval(effect ledger.effects, out limit_minor bigint, out waits boolean)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select p.compensation_approval_limit_minor,
           coalesce(coalesce(abs((effect).amount_minor), 0) > p.compensation_approval_limit_minor, false)
      from ledger.policy_for((effect).action) p
$$;

revoke all on function ledger.compensation_approval(ledger.effects) from public;
grant execute on function ledger.compensation_approval(ledger.effects) to effect_operator, effect_readonly;
