create or replace function ledger.effect_for_writer(op_key text) returns ledger.effects
language plpgsql
as $$
declare
    effect ledger.effects;
begin
    select e.* into effect from ledger.effects e
     where e.op_key = effect_for_writer.op_key for update;
    if not found then
        raise exception 'ledger: no effect with key %', effect_for_writer.op_key
            using errcode = 'no_data_found', hint = 'call ledger.begin_effect first';
    end if;
    return effect;
end
$$;

revoke all on function ledger.effect_for_writer(text) from public;
