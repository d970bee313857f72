-- Operators: read everything, change rows only through the operator
-- functions. A function named ledger.op_* is an operator action and its
-- name is its grant: adding one needs no line in this file, only a call of
-- ledger.grant_operator_actions() at the end of a migration that comes
-- after this one. No function the owner keeps for itself may carry the prefix.
create or replace function ledger.grant_operator_actions() returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    action regprocedure;
    granted integer := 0;
begin
    for action in select p.oid::regprocedure from pg_proc p
                   where p.pronamespace = 'ledger'::regnamespace and p.proname like 'op\_%'
                   order by p.oid
    loop
        execute format('grant execute on function %s to effect_operator', action);
        granted := granted + 1;
    end loop;
    return granted;
end
$$;

revoke all on function ledger.grant_operator_actions() from public;
