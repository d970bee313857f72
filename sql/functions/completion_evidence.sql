-- What a completion said, kept with an attempt when it is not applied: a
-- repeat or a late result. Built only then, not on every completion.
create or replace function ledger.completion_evidence(
    outcome text, external_ref text, result jsonb, retryable boolean, reason text, error_class text
) returns jsonb
language sql immutable as $$
    select jsonb_strip_nulls(jsonb_build_object(
        'outcome', outcome, 'external_ref', external_ref, 'result', result,
        'retryable', retryable, 'reason', reason, 'error_class', error_class))
$$;

revoke all on function ledger.completion_evidence(text,text,jsonb,boolean,text,text) from public;
