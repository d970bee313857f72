-- Records a step owed on an effect; one of that kind already open stays.
create or replace function ledger.record_next_step(effect_id bigint, step text, why text, recorded_by text)
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    insert into ledger.next_steps (effect_id, step, why, recorded_by)
    values (record_next_step.effect_id, record_next_step.step, record_next_step.why,
            coalesce(nullif(btrim(record_next_step.recorded_by), ''), 'ledger'))
    on conflict (effect_id, step) where done_at is null do nothing
$$;

revoke all on function ledger.record_next_step(bigint,text,text,text) from public;
