-- Append-only, with two sanctioned exceptions: retention (see
-- ledger.prune_settled in 0013_retention.sql for why a DELETE through it is
-- safe) and a move between partitions.
create or replace function ledger.append_only_except_prune() returns trigger
language plpgsql as $$
begin
    if tg_op = 'DELETE' and ledger.moving_history() then
        return old;
    end if;
    if tg_op = 'DELETE'
       and current_setting('ledger.prune_xact', true) = pg_current_xact_id()::text
       and exists (select 1 from ledger.effects e
                    where e.id = old.effect_id and e.state in ('succeeded', 'failed', 'cancelled')) then
        return old;
    end if;
    raise exception 'ledger: % is append-only (% refused)', tg_table_schema || '.' || tg_table_name, tg_op
        using errcode = 'insufficient_privilege',
              hint = 'old settled effects are removed with ledger.prune_settled';
end
$$;

revoke all on function ledger.append_only_except_prune() from public;
