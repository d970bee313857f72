create or replace function ledger.effect_snapshot(effect ledger.effects) returns jsonb
language sql immutable as $$
    select jsonb_strip_nulls(jsonb_build_object(
        'state', (effect).state, 'version', (effect).version,
        'external_ref', (effect).external_ref, 'retryable', (effect).retryable,
        'failure_reason', (effect).failure_reason, 'attention', (effect).attention,
        'held_by', (effect).held_by,
        'duplicates_acknowledged_at', (effect).duplicates_acknowledged_at))
$$;

revoke all on function ledger.effect_snapshot(ledger.effects) from public;
