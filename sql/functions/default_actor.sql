-- Who made a version kept in the row: while pending, the worker that
-- dispatched the effect (a dispatch always names one), else its requester;
-- an answer, its requester, as the writer records an answer that names no
-- worker (0005).
create or replace function ledger.default_actor(state text, requested_by text, dispatched_by text) returns text
language sql immutable as $$
    select case when state = 'pending' then coalesce(dispatched_by, requested_by) else requested_by end
$$;

revoke all on function ledger.default_actor(text,text,text) from public;
grant execute on function ledger.default_actor(text,text,text) to effect_operator, effect_readonly;
