create or replace function ledger.history_tables() returns text[]
language sql immutable as $$
    select array['effect_versions', 'attempts', 'reconciliations', 'audit_log']
$$;

revoke all on function ledger.history_tables() from public;
grant execute on function ledger.history_tables() to effect_operator, effect_readonly;
