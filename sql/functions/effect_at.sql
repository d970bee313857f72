-- One effect as it stood at T. Views join an effect by id through this,
-- as a lateral call: each id is then one primary-key lookup. A plain join
-- with ledger.effects_at(T) is flattened into a hash join over every row of
-- the ledger; `limit 1` (an id is one row at any instant) keeps the planner
-- from flattening it.
create or replace function ledger.effect_at(effect_id bigint, at_time timestamptz) returns setof ledger.effects
language sql stable as $$
    select e.* from ledger.effects_at(at_time) e where e.id = effect_id limit 1
$$;

revoke all on function ledger.effect_at(bigint,timestamp with time zone) from public;
grant execute on function ledger.effect_at(bigint,timestamp with time zone) to effect_operator, effect_readonly;
