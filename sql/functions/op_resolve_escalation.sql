create or replace function ledger.op_resolve_escalation(escalation_key text, operator text, reason text)
returns table (status text, state text, op_key text, sink text, audit_seq bigint)
language sql security definer
set search_path = pg_catalog, pg_temp
as $$
    select ledger.forget_caller_settings();
    select * from ledger.close_escalation($1, $2, $3, 'resolved')
$$;

revoke all on function ledger.op_resolve_escalation(text,text,text) from public;
grant execute on function ledger.op_resolve_escalation(text,text,text) to effect_operator;
