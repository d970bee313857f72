-- Whether an effect's key, action or target holds one: one match over the
-- three joined finds exactly what a match over each would (the class is of
-- single characters), and every new effect is checked twice (begin_effect,
-- then the guard), so the regex runs once each time rather than three.
-- Stable, as concat is, so that it is inlined too.
create or replace function ledger.has_hidden_character_in(op_key text, action text, target text) returns boolean
language sql stable parallel safe
as $$
    select ledger.has_hidden_character(pg_catalog.concat(op_key, action, target))
$$;

revoke all on function ledger.has_hidden_character_in(text,text,text) from public;
