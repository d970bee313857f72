create or replace function ledger.record_attempt(
    effect ledger.effects, kind text, requested_by text, request_id text,
    params_hash text, params jsonb default null, detail jsonb default null, flagged boolean default false
) returns void
language plpgsql as $$
begin
    insert into ledger.attempts (effect_id, op_key, kind, requested_by, request_id, params_hash,
                                 params, detail, flagged)
    values ((effect).id, (effect).op_key, record_attempt.kind, record_attempt.requested_by,
            record_attempt.request_id, record_attempt.params_hash, record_attempt.params,
            record_attempt.detail, record_attempt.flagged);
end
$$;

revoke all on function ledger.record_attempt(ledger.effects,text,text,text,text,jsonb,jsonb,boolean) from public;
