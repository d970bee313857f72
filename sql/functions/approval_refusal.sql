-- Why `approval` does not authorise this intent now, or null. `approval`
-- is the row named (null when none is registered); `consumer` is the effect
-- asking (null for a new key). `required`: the action's policy wants a
-- registered approval, for every effect above `limit_minor` (for every
-- effect when it has no limit) — naming none does not dodge it.
create or replace function ledger.approval_refusal(
    approval ledger.approvals, approval_ref text, approval_version integer, required boolean,
    action text, target text, amount_minor bigint, currency text, params_hash text, consumer bigint,
    limit_minor bigint default null
) returns text
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    newest integer;
    taken  bigint;
begin
    if approval_ref is null then
        if required and (limit_minor is null or coalesce(amount_minor, 0) > limit_minor) then
            return format('the %s policy requires an approval the approving system registered%s, and this '
                          'effect names none', action,
                          case when limit_minor is not null
                               then format(' above %s minor units', limit_minor) else '' end);
        end if;
        return null;
    end if;
    if (approval).approval_ref is null then
        if required or exists (select 1 from ledger.approvals a where a.approval_ref = approval_refusal.approval_ref) then
            return format('approval %s v%s is unknown: the approving system has not registered it',
                          approval_ref, coalesce(approval_version::text, '?'));
        end if;
        return null;
    end if;
    select max(a.version) into newest from ledger.approvals a where a.approval_ref = (approval).approval_ref;
    if newest > (approval).version then
        return format('approval %s v%s is superseded by v%s', (approval).approval_ref, (approval).version, newest);
    end if;
    if (approval).revoked_at is not null then
        return format('approval %s v%s was revoked by %s at %s', (approval).approval_ref, (approval).version,
                      (approval).revoked_by, (approval).revoked_at);
    end if;
    if (approval).expires_at <= now() then
        return format('approval %s v%s expired at %s', (approval).approval_ref, (approval).version,
                      (approval).expires_at);
    end if;
    if (approval).action <> approval_refusal.action or (approval).target <> approval_refusal.target then
        return format('approval %s v%s authorises %s on %s, not %s on %s', (approval).approval_ref,
                      (approval).version, (approval).action, (approval).target,
                      approval_refusal.action, approval_refusal.target);
    end if;
    if (approval).amount_ceiling_minor is not null
       and (approval_refusal.amount_minor is null
            or approval_refusal.amount_minor > (approval).amount_ceiling_minor
            or approval_refusal.currency is distinct from (approval).currency) then
        return format('%s %s is outside approval %s v%s (at most %s %s)',
                      coalesce(approval_refusal.amount_minor::text, 'no amount'),
                      coalesce(approval_refusal.currency, ''), (approval).approval_ref, (approval).version,
                      (approval).amount_ceiling_minor, (approval).currency);
    end if;
    if (approval).params_hash is not null and (approval).params_hash <> approval_refusal.params_hash then
        return format('the params differ from those approval %s v%s authorises', (approval).approval_ref,
                      (approval).version);
    end if;
    -- An approval's versions are one approval: a new version extends or
    -- corrects it, and never authorises a second effect.
    select a.consumed_by into taken from ledger.approvals a
     where a.approval_ref = (approval).approval_ref and a.consumed_by is not null
       and a.consumed_by is distinct from consumer
     limit 1;
    if taken is not null then
        return format('approval %s already authorised another effect (id %s)', (approval).approval_ref, taken);
    end if;
    return null;
end
$$;

revoke all on function ledger.approval_refusal(ledger.approvals,text,integer,boolean,text,text,bigint,text,text,bigint,bigint) from public;
