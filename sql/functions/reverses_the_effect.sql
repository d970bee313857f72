-- Whether a compensation reverses the effect it is linked to, rather than
-- an extra provider record of it (ledger.op_reverse_duplicate): only the
-- former is the effect's compensation.
create or replace function ledger.reverses_the_effect(compensation_params jsonb) returns boolean
language sql immutable parallel safe
as $$
    select not coalesce(compensation_params ? 'reverses_duplicate', false)
$$;

revoke all on function ledger.reverses_the_effect(jsonb) from public;
grant execute on function ledger.reverses_the_effect(jsonb) to effect_operator, effect_readonly;
