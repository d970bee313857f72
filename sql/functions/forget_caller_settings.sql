-- The settings the ledger's functions leave for its triggers (who acts and
-- why, and the markers of retention and of history moving between
-- partitions) are the ledger's word only if the ledger set them: every
-- SECURITY DEFINER function forgets whatever its caller set before it does
-- anything, so a login cannot write a reason of its choosing into history
-- or pass for retention. One SQL expression, inlined where it is called: a
-- plain expression on the writer's path, no query of its own. A function
-- with SET clauses for them would do the same on exit too, but PostgreSQL
-- before 16 lets only a superuser attach a custom setting to a function.
create or replace function ledger.forget_caller_settings() returns text
language sql volatile as $$
    select set_config('ledger.actor', '', true) || set_config('ledger.reason', '', true)
        || set_config('ledger.history_move_xact', '', true) || set_config('ledger.prune_xact', '', true)
$$;

revoke all on function ledger.forget_caller_settings() from public;
