-- The audit trail as it stood: entries made up to the instant.
create or replace function ledger.audit_log_at(at_time timestamptz) returns setof ledger.audit_log
language sql stable as $$
    select a.* from ledger.audit_log a where at_time is null or a.at <= at_time
$$;

revoke all on function ledger.audit_log_at(timestamp with time zone) from public;
grant execute on function ledger.audit_log_at(timestamp with time zone) to effect_operator, effect_readonly;
