-- Why `action` does not apply to the effect; null: it applies.
create or replace function ledger.why_not(effect ledger.effects, action text) returns text
language sql stable as $$
    select r.refused ->> action from ledger.refusals(array[(effect).op_key]) r
$$;

revoke all on function ledger.why_not(ledger.effects,text) from public;
grant execute on function ledger.why_not(ledger.effects,text) to effect_operator, effect_readonly;
