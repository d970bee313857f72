-- Why a writer call that names its effect's target is refused, or null.
-- On a ledger distributed by target (docs/scale.md) the target routes the
-- call; writers may pass it now, and a key answered on another target is a
-- writer's mistake (or two writers sharing a key) that must not settle
-- what it did not mean.
create or replace function ledger.target_refusal(effect ledger.effects, target text) returns text
language sql stable as $$
    select case when target is not null and target is distinct from (effect).target
                then format('effect %s is on target %s, not %s', (effect).op_key, (effect).target, target) end
$$;

revoke all on function ledger.target_refusal(ledger.effects,text) from public;
