-- Locks a compensation effect by key, refusing anything else: the operator
-- role may dispatch and complete compensations, never agents' effects.
create or replace function ledger.lock_compensation(compensation_key text, operator text) returns ledger.effects
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    compensation ledger.effects;
begin
    if coalesce(btrim(operator), '') = '' then
        raise exception 'ledger: an operator name is required' using errcode = 'invalid_parameter_value';
    end if;
    select e.* into compensation from ledger.effects e
     where e.op_key = lock_compensation.compensation_key
       for update;
    if not found then
        raise exception 'ledger: no effect with key %', compensation_key using errcode = 'EW404';
    end if;
    if compensation.compensates is null then
        raise exception 'ledger: % is not a compensation', compensation_key using errcode = 'EW422';
    end if;
    return compensation;
end
$$;

revoke all on function ledger.lock_compensation(text,text) from public;
