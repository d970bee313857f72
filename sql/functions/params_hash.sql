-- jsonb already stores objects with sorted keys and no insignificant
-- whitespace, so its text form is the canonical form of the params.
-- Stable, as convert_to is: a SQL function is inlined only when its body is
-- as stable as it claims, and one that is not was parsed and planned again
-- in every writer transaction.
create or replace function ledger.params_hash(params jsonb) returns text
language sql stable strict as $$
    select encode(sha256(convert_to(params::text, 'UTF8')), 'hex')
$$;

revoke all on function ledger.params_hash(jsonb) from public;
