-- How the ledger names an action: as written, lower-case and trimmed, so
-- Refund and " refund" are refund, under refund's policy. Every place that
-- takes an action from a caller names it here (a sql function, inlined).
create or replace function ledger.action_name(action text) returns text
language sql immutable as $$
    select lower(btrim(action))
$$;

revoke all on function ledger.action_name(text) from public;
