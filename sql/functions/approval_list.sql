-- The newest approvals first, with the key of the effect each authorised:
-- what `effectwatch approval list` shows. The approving system reads its
-- approvals here without reading the effects themselves.
create or replace function ledger.approval_list(max_rows bigint)
returns table (approval_ref text, version integer, action text, target text, amount_ceiling_minor bigint,
               currency text, expires_at timestamptz, granted_by text, revoked_at timestamptz,
               consumed_by text)
language sql stable security definer
set search_path = pg_catalog, pg_temp
as $$
    select a.approval_ref, a.version, a.action, a.target, a.amount_ceiling_minor, a.currency,
           a.expires_at, a.granted_by, a.revoked_at, e.op_key
      from ledger.approvals a left join ledger.effects e on e.id = a.consumed_by
     order by a.granted_at desc, a.approval_ref, a.version desc
     limit max_rows
$$;

revoke all on function ledger.approval_list(bigint) from public;
grant execute on function ledger.approval_list(bigint) to effect_approver, effect_operator, effect_readonly;
