-- Whether the login is a superuser (SET ROLE aside): its own function, so
-- that writer_refusal has no query in it and is inlined into its callers'
-- expressions, where a function call of its own costs every writer call.
create or replace function ledger.session_is_superuser() returns boolean
language sql stable as $$
    select coalesce((select r.rolsuper from pg_catalog.pg_roles r where r.rolname = session_user), false)
$$;

revoke all on function ledger.session_is_superuser() from public;
