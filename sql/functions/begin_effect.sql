-- The writer API's front door: begin_checked, claiming nothing.
create or replace function ledger.begin_effect(
    op_key           text,
    action           text,
    target           text,
    params           jsonb,
    requested_by     text,
    pending_window   interval default null,
    amount_minor     bigint   default null,
    currency         text     default null,
    provider         text     default null,
    approval_ref     text     default null,
    approval_version integer  default null,
    request_id       text     default null,
    during           tstzrange default null
) returns ledger.begin_answer
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    ignored text;
begin
    ignored := ledger.forget_caller_settings();
    return ledger.begin_checked(begin_effect.op_key, begin_effect.action, begin_effect.target,
        begin_effect.params, begin_effect.requested_by, begin_effect.pending_window,
        begin_effect.amount_minor, begin_effect.currency, begin_effect.provider,
        begin_effect.approval_ref, begin_effect.approval_version, begin_effect.request_id,
        begin_effect.during);
end
$$;

revoke all on function ledger.begin_effect(text,text,text,jsonb,text,interval,bigint,text,text,text,integer,text,tstzrange) from public;
grant execute on function ledger.begin_effect(text,text,text,jsonb,text,interval,bigint,text,text,text,integer,text,tstzrange) to effect_agent;
