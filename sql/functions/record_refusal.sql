-- A refused writer call changes nothing but is kept, flagged, so an
-- operator sees who tried to settle what is not theirs.
create or replace function ledger.record_refusal(
    effect ledger.effects, call text, refusal text, worker text, request_id text
) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform ledger.record_attempt(effect, 'refused', worker, request_id, null,
        detail => jsonb_build_object('call', call, 'login', session_user::text,
                                     'owner_role', (effect).owner_role, 'refused', refusal),
        flagged => true);
    raise warning 'ledger: refused: %', refusal;
end
$$;

revoke all on function ledger.record_refusal(ledger.effects,text,text,text,text) from public;
