-- Whether text holds one: inlined where it is used, the class folded into
-- the plan. (Not strict, which would keep it from being inlined; null still
-- answers null.)
create or replace function ledger.has_hidden_character(value text) returns boolean
language sql immutable parallel safe
as $$
    select value operator(pg_catalog.~) ledger.hidden_character_class()
$$;

revoke all on function ledger.has_hidden_character(text) from public;
