-- The reason a writer's change carries when its caller gives none: none
-- while pending (a dispatch), else what the worker's answer was. The
-- writer's completion (0005) and the history view of a version kept in the
-- row (latest_version_in_row, 0001) read it here, so the guard keeps in the
-- row only what the view will say again.
create or replace function ledger.default_reason(state text) returns text
language sql immutable as $$
    select case when state <> 'pending' then 'worker reported ' || state end
$$;

revoke all on function ledger.default_reason(text) from public;
grant execute on function ledger.default_reason(text) to effect_operator, effect_readonly;
