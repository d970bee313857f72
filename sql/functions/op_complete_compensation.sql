-- Step 4: what the provider answered to the dispatch. A second answer, or
-- one after the compensation was settled another way, is kept as a repeat
-- or a flagged late result by ledger.complete_effect.
create or replace function ledger.op_complete_compensation(
    compensation_key text, operator text, outcome text,
    external_ref text default null, result jsonb default null,
    retryable boolean default null, reason text default null
) returns table (applied boolean, state text, late boolean, original_state text, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    compensation ledger.effects;
    original     ledger.effects;
    before       jsonb;
    completed    record;
    why          text;
    seq          bigint;
begin
    perform ledger.forget_caller_settings();
    compensation := ledger.lock_compensation(op_complete_compensation.compensation_key,
                                             op_complete_compensation.operator);
    before := ledger.effect_snapshot(compensation);
    why := coalesce(nullif(btrim(op_complete_compensation.reason), ''),
                    'provider answered ' || coalesce(op_complete_compensation.outcome, '?'));
    select c.applied, c.late into completed
      from ledger.record_completion(compensation, op_complete_compensation.outcome,
                                    op_complete_compensation.external_ref, op_complete_compensation.result,
                                    op_complete_compensation.retryable, why, null,
                                    op_complete_compensation.operator) c;
    select e.* into compensation from ledger.effects e where e.id = compensation.id;
    select e.* into original from ledger.effects e where e.id = compensation.compensates;
    perform set_config('ledger.actor', op_complete_compensation.operator, true);
    seq := ledger.audit(op_complete_compensation.operator, 'compensation_result', compensation, why,
                        before, ledger.effect_snapshot(compensation) || jsonb_build_object(
                            'applied', completed.applied, 'late', completed.late,
                            'original_key', original.op_key, 'original_state', original.state));
    return query select completed.applied, compensation.state, completed.late, original.state, seq;
end
$$;

revoke all on function ledger.op_complete_compensation(text,text,text,text,jsonb,boolean,text) from public;
grant execute on function ledger.op_complete_compensation(text,text,text,text,jsonb,boolean,text) to effect_operator;
