create or replace function ledger.revoke_approval(approval_ref text, version integer, revoked_by text, reason text)
returns table (approval jsonb, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    before  ledger.approvals;
    revoked ledger.approvals;
    seq     bigint;
begin
    perform ledger.forget_caller_settings();
    perform ledger.require_who_and_why(revoke_approval.revoked_by, revoke_approval.reason, 'to revoke an approval');
    -- No version: the newest, the one that authorises (older ones are superseded).
    select a.* into before from ledger.approvals a
     where a.approval_ref = revoke_approval.approval_ref
       and a.version = coalesce(revoke_approval.version,
                                (select max(b.version) from ledger.approvals b
                                  where b.approval_ref = revoke_approval.approval_ref))
       for update;
    if not found then
        raise exception 'ledger: no approval %',
            revoke_approval.approval_ref || coalesce(' v' || revoke_approval.version, '')
            using errcode = 'EW404';
    end if;
    if before.revoked_at is not null then
        return query select ledger.approval_snapshot(before), null::bigint;
        return;
    end if;
    perform set_config('ledger.actor', revoke_approval.revoked_by, true);
    update ledger.approvals a
       set revoked_at = now(), revoked_by = revoke_approval.revoked_by, revoke_reason = revoke_approval.reason
     where a.approval_ref = before.approval_ref and a.version = before.version
    returning a.* into revoked;
    seq := ledger.audit(revoke_approval.revoked_by, 'revoke_approval', null::ledger.effects, revoke_approval.reason,
                        ledger.approval_snapshot(before), ledger.approval_snapshot(revoked));
    return query select ledger.approval_snapshot(revoked), seq;
end
$$;

revoke all on function ledger.revoke_approval(text,integer,text,text) from public;
grant execute on function ledger.revoke_approval(text,integer,text,text) to effect_approver;
