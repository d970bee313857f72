create or replace function ledger.op_set_unknown_actions(mode text, operator text, reason text)
returns table (unknown_actions text, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before text;
    seq    bigint;
begin
    perform ledger.forget_caller_settings();
    perform ledger.require_who_and_why(op_set_unknown_actions.operator, op_set_unknown_actions.reason,
                                       'to change how unknown actions are treated');
    if op_set_unknown_actions.mode is null or op_set_unknown_actions.mode not in ('allow', 'refuse') then
        raise exception 'ledger: unknown actions are allowed or refused, not %', op_set_unknown_actions.mode
            using errcode = 'invalid_parameter_value';
    end if;
    perform set_config('ledger.actor', op_set_unknown_actions.operator, true);
    perform set_config('ledger.reason', op_set_unknown_actions.reason, true);
    select s.unknown_actions into before from ledger.ledger_settings s for update;
    update ledger.ledger_settings s
       set unknown_actions = op_set_unknown_actions.mode, updated_at = now();
    seq := ledger.audit(op_set_unknown_actions.operator, 'set_unknown_actions', null::ledger.effects,
                        op_set_unknown_actions.reason, jsonb_build_object('unknown_actions', before),
                        jsonb_build_object('unknown_actions', op_set_unknown_actions.mode));
    return query select op_set_unknown_actions.mode, seq;
end
$$;

revoke all on function ledger.op_set_unknown_actions(text,text,text) from public;
grant execute on function ledger.op_set_unknown_actions(text,text,text) to effect_operator;
