-- Marks that a person was asked about the effect, so no reconciler asks
-- again; the escalation itself is written by ledger.open_escalation.
create or replace function ledger.mark_reconcile_escalated(op_key text, reconciler text) returns void
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    perform ledger.forget_caller_settings();
    insert into ledger.reconcile_leases as l (effect_id, escalated_at)
    select e.id, now() from ledger.effects e where e.op_key = mark_reconcile_escalated.op_key
    on conflict (effect_id) do update set escalated_at = coalesce(l.escalated_at, now());
end
$$;

revoke all on function ledger.mark_reconcile_escalated(text,text) from public;
grant execute on function ledger.mark_reconcile_escalated(text,text) to effect_operator;
