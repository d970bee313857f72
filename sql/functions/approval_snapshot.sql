create or replace function ledger.approval_snapshot(approval ledger.approvals) returns jsonb
language sql immutable as $$
    select case when approval is null then null else jsonb_strip_nulls(jsonb_build_object(
        'approval_ref', (approval).approval_ref, 'version', (approval).version,
        'action', (approval).action, 'target', (approval).target,
        'amount_ceiling_minor', (approval).amount_ceiling_minor, 'currency', (approval).currency,
        'params_hash', (approval).params_hash, 'expires_at', (approval).expires_at,
        'granted_by', (approval).granted_by, 'revoked_at', (approval).revoked_at,
        'revoked_by', (approval).revoked_by, 'consumed_by', (approval).consumed_by)) end
$$;

revoke all on function ledger.approval_snapshot(ledger.approvals) from public;
