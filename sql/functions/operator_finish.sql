-- The end of an operator call: its audit entry, with the effect as it was
-- locked and as the call left it, and what the call answers. An effect the
-- call did not change (the same version: every change moves it) has no
-- after in the entry, as a note on the record never had.
create or replace function ledger.operator_finish(
    action text, before ledger.effects, after ledger.effects, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    audit_seq := ledger.audit(operator_finish.operator, operator_finish.action, operator_finish.after,
                              operator_finish.reason, ledger.effect_snapshot(operator_finish.before),
                              case when (operator_finish.after).version
                                        is distinct from (operator_finish.before).version
                                   then ledger.effect_snapshot(operator_finish.after) end);
    state := (operator_finish.after).state;
    version := (operator_finish.after).version;
    return next;
end
$$;

revoke all on function ledger.operator_finish(text,ledger.effects,ledger.effects,text,text) from public;
