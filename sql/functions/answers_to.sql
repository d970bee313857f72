-- Whether this session's login is answered about an effect the login
-- `owner` made: its own; a superuser's session; a login that is a member of
-- the owner or of which the owner is a member; a login sharing with the
-- owner a role named effect_tenant_*. A superuser owner is in no tenant
-- (pg_has_role makes a superuser a member of every role). Called only off
-- the hot path, for an answer about a key that is not plainly the caller's.
create or replace function ledger.answers_to(owner text) returns boolean
language sql stable
as $$
    select coalesce(owner = session_user::text, false)
        or ledger.session_is_superuser()
        or exists (
            select 1
              from pg_catalog.pg_roles o, pg_catalog.pg_roles s
             where o.rolname = owner and s.rolname = session_user and not o.rolsuper
               and (pg_catalog.pg_has_role(s.oid, o.oid, 'MEMBER')
                    or pg_catalog.pg_has_role(o.oid, s.oid, 'MEMBER')
                    or exists (select 1 from pg_catalog.pg_roles t
                                where pg_catalog.starts_with(t.rolname::text, 'effect_tenant_')
                                  and pg_catalog.pg_has_role(s.oid, t.oid, 'MEMBER')
                                  and pg_catalog.pg_has_role(o.oid, t.oid, 'MEMBER'))))
$$;

revoke all on function ledger.answers_to(text) from public;
