-- Locks the effect and checks the operator saw its current version.
create or replace function ledger.lock_for_operator(
    op_key text, expected_version bigint, operator text, reason text, reason_required boolean
) returns ledger.effects
language plpgsql as $$
declare
    effect ledger.effects;
begin
    if coalesce(btrim(operator), '') = '' then
        raise exception 'ledger: an operator name is required' using errcode = 'invalid_parameter_value';
    end if;
    if reason_required and coalesce(btrim(reason), '') = '' then
        raise exception 'ledger: a reason is required for an action that changes state (key %)', op_key
            using errcode = 'invalid_parameter_value';
    end if;
    -- The same lock order as begin_effect (target, then row): an operator
    -- action that creates an effect on the target (a compensation) and an
    -- agent calling begin_effect for this key can then never deadlock.
    perform pg_advisory_xact_lock(hashtextextended('ledger.target:' || e.target, 0))
       from ledger.effects e where e.op_key = lock_for_operator.op_key;
    select e.* into effect from ledger.effects e where e.op_key = lock_for_operator.op_key for update;
    if not found then
        raise exception 'ledger: no effect with key %', op_key using errcode = 'EW404';
    end if;
    if expected_version is not null and effect.version <> expected_version then
        raise exception 'ledger: effect % changed since you looked (version % now, you saw %)',
            op_key, effect.version, expected_version
            using errcode = 'EW409', hint = 'refresh and decide again';
    end if;
    perform set_config('ledger.actor', operator, true);
    perform set_config('ledger.reason', coalesce(reason, ''), true);
    return effect;
end
$$;

revoke all on function ledger.lock_for_operator(text,bigint,text,text,boolean) from public;
