-- Who is acting, as set by the ledger functions for the current transaction
-- (falls back to the database role for hand-written statements).
create or replace function ledger.current_actor() returns text
language sql stable as $$
    select coalesce(nullif(current_setting('ledger.actor', true), ''), session_user::text)
$$;

revoke all on function ledger.current_actor() from public;
grant execute on function ledger.current_actor() to effect_agent, effect_operator, effect_readonly;
