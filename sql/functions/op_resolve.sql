-- Resolve by hand, with evidence: succeeded needs the provider's reference.
create or replace function ledger.op_resolve(
    op_key text, expected_version bigint, operator text, reason text,
    outcome text, external_ref text default null, retryable boolean default false
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before ledger.effects;
    after  ledger.effects;
begin
    perform ledger.forget_caller_settings();
    before := ledger.operator_begin('resolve', op_resolve.op_key, op_resolve.expected_version,
                                    op_resolve.operator, op_resolve.reason,
                                    refused_argument => case
        when op_resolve.outcome not in ('succeeded', 'failed') or op_resolve.outcome is null
        then 'ledger: resolve outcome must be succeeded or failed'
        when op_resolve.outcome = 'succeeded' and coalesce(btrim(op_resolve.external_ref), '') = ''
        then format('ledger: resolving %s as succeeded needs the provider''s external reference',
                    op_resolve.op_key) end);
    update ledger.effects e
       set state = op_resolve.outcome,
           external_ref = coalesce(op_resolve.external_ref, e.external_ref),
           retryable = case when op_resolve.outcome = 'failed' then coalesce(op_resolve.retryable, false) end,
           failure_reason = case when op_resolve.outcome = 'failed' then op_resolve.reason end,
           attention = null
     where e.id = before.id
    returning e.* into after;
    return query select * from ledger.operator_finish('resolve', before, after,
                                                      op_resolve.operator, op_resolve.reason);
end
$$;

revoke all on function ledger.op_resolve(text,bigint,text,text,text,text,boolean) from public;
grant execute on function ledger.op_resolve(text,bigint,text,text,text,text,boolean) to effect_operator;
