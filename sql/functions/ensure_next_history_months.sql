-- What the reconciler and migrate call: this month and the two after it.
create or replace function ledger.ensure_next_history_months() returns integer
language sql security definer
set search_path = pg_catalog, pg_temp
as $$
    select ledger.forget_caller_settings();
    select ledger.ensure_history_partitions(now(), now() + interval '2 months')
$$;

revoke all on function ledger.ensure_next_history_months() from public;
grant execute on function ledger.ensure_next_history_months() to effect_operator;
