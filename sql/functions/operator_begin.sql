-- An operator acting on an effect shown unknown because its worker's lease
-- ran out acts on it as shown: the loss is written first, under the lock.
create or replace function ledger.operator_begin(
    action text, op_key text, expected_version bigint, operator text, reason text,
    refused_argument text default null
) returns ledger.effects
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    effect ledger.effects;
begin
    effect := ledger.lock_for_operator(operator_begin.op_key, operator_begin.expected_version,
                                       operator_begin.operator, operator_begin.reason, true);
    if operator_begin.refused_argument is not null then
        raise exception '%', operator_begin.refused_argument using errcode = 'invalid_parameter_value';
    end if;
    effect := ledger.write_worker_lost(effect);
    perform set_config('ledger.actor', operator_begin.operator, true);
    perform set_config('ledger.reason', coalesce(operator_begin.reason, ''), true);
    perform ledger.require_applicable(effect, operator_begin.action);
    return effect;
end
$$;

revoke all on function ledger.operator_begin(text,text,bigint,text,text,text) from public;
