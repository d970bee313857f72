-- The approval an intent names, locked so two branches that name it at
-- once are decided one after the other.
create or replace function ledger.lock_approval(approval_ref text, approval_version integer)
returns ledger.approvals
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    approval ledger.approvals;
begin
    if approval_ref is null then
        return null;
    end if;
    select a.* into approval from ledger.approvals a
     where a.approval_ref = lock_approval.approval_ref
       and a.version = coalesce(lock_approval.approval_version,
                                (select max(b.version) from ledger.approvals b
                                  where b.approval_ref = lock_approval.approval_ref))
       for update;
    return approval;
end
$$;

revoke all on function ledger.lock_approval(text,integer) from public;
