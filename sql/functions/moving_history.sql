-- True while the partition functions (ensure_history_partitions, drop_history_months) move
-- history rows between a month and the kept partition in this transaction:
-- the rows are carried over unchanged, not altered. Set, like
-- ledger.prune_xact below, to the id of the transaction that moves, so a
-- value set by hand in another never matches; only the owner holds INSERT
-- or DELETE on the history tables at all.
create or replace function ledger.moving_history() returns boolean
language sql volatile as $$
    select current_setting('ledger.history_move_xact', true) = pg_current_xact_id()::text
$$;

revoke all on function ledger.moving_history() from public;
