-- Approvals that bind and expire. The approving system (a login with
-- effect_approver) records what it authorises — one action on one target,
-- an amount ceiling, the params if they matter, an expiry — and may revoke
-- it; each change is audited. begin_effect checks the approval of every new
-- key that names a registered one (and, where the action's policy says
-- approvals_must_be_registered, refuses a ref nobody registered);
-- mark_dispatched checks it again, so an approval that expired or was
-- revoked between attempts stops the dispatch.

create function ledger.approval_snapshot(approval ledger.approvals) returns jsonb
language sql immutable as $$
    select case when approval is null then null else jsonb_strip_nulls(jsonb_build_object(
        'approval_ref', (approval).approval_ref, 'version', (approval).version,
        'action', (approval).action, 'target', (approval).target,
        'amount_ceiling_minor', (approval).amount_ceiling_minor, 'currency', (approval).currency,
        'params_hash', (approval).params_hash, 'expires_at', (approval).expires_at,
        'granted_by', (approval).granted_by, 'revoked_at', (approval).revoked_at,
        'revoked_by', (approval).revoked_by, 'consumed_by', (approval).consumed_by)) end
$$;

create function ledger.grant_approval(
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

create function ledger.revoke_approval(approval_ref text, version integer, revoked_by text, reason text)
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

-- Why `approval` does not authorise this intent now, or null. `approval`
-- is the row named (null when none is registered); `consumer` is the effect
-- asking (null for a new key). `required`: the action's policy wants a
-- registered approval, for every effect above `limit_minor` (for every
-- effect when it has no limit) — naming none does not dodge it.
create function ledger.approval_refusal(
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

-- The approval an intent names, locked so two branches that name it at
-- once are decided one after the other.
create function ledger.lock_approval(approval_ref text, approval_version integer)
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

-- The newest approvals first, with the key of the effect each authorised:
-- what `effectwatch approval list` shows. The approving system reads its
-- approvals here without reading the effects themselves.
create function ledger.approval_list(max_rows bigint)
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
