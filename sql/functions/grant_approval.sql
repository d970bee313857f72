create or replace function ledger.grant_approval(
    approval_ref         text,
    version              integer,
    action               text,
    target               text,
    expires_at           timestamptz,
    granted_by           text,
    reason               text,
    amount_ceiling_minor bigint default null,
    currency             text   default null,
    params               jsonb  default null
) returns table (approval jsonb, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    granted ledger.approvals;
    seq     bigint;
begin
    perform ledger.forget_caller_settings();
    perform ledger.require_who_and_why(grant_approval.granted_by, grant_approval.reason, 'to grant an approval');
    if coalesce(btrim(grant_approval.approval_ref), '') = '' or grant_approval.version is null
       or coalesce(grant_approval.action, '') = '' or coalesce(grant_approval.target, '') = '' then
        raise exception 'ledger: an approval needs a ref, a version, an action and a target'
            using errcode = 'invalid_parameter_value';
    end if;
    if grant_approval.approval_ref ~* '^compensation_request:' then
        raise exception 'ledger: approval refs beginning compensation_request: are the ledger''s own (four-eyes requests)'
            using errcode = 'insufficient_privilege';
    end if;
    if grant_approval.expires_at is null or grant_approval.expires_at <= now() then
        raise exception 'ledger: approval % v% would be expired already (expires %)',
            grant_approval.approval_ref, grant_approval.version, grant_approval.expires_at
            using errcode = 'invalid_parameter_value';
    end if;
    perform set_config('ledger.actor', grant_approval.granted_by, true);
    insert into ledger.approvals as a (approval_ref, version, action, target, amount_ceiling_minor, currency,
                                       params_hash, expires_at, granted_by)
    values (grant_approval.approval_ref, grant_approval.version, grant_approval.action, grant_approval.target,
            grant_approval.amount_ceiling_minor, upper(grant_approval.currency),
            case when grant_approval.params is not null then ledger.params_hash(grant_approval.params) end,
            grant_approval.expires_at, grant_approval.granted_by)
    on conflict on constraint approvals_pkey do nothing
    returning a.* into granted;
    if not found then
        raise exception 'ledger: approval % v% exists: a change is a new version', grant_approval.approval_ref,
            grant_approval.version using errcode = 'EW409';
    end if;
    seq := ledger.audit(grant_approval.granted_by, 'grant_approval', null::ledger.effects, grant_approval.reason,
                        null, ledger.approval_snapshot(granted));
    return query select ledger.approval_snapshot(granted), seq;
end
$$;

revoke all on function ledger.grant_approval(text,integer,text,text,timestamp with time zone,text,text,bigint,text,jsonb) from public;
grant execute on function ledger.grant_approval(text,integer,text,text,timestamp with time zone,text,text,bigint,text,jsonb) to effect_approver;
