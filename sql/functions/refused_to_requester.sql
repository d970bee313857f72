-- For a gateway, one login serving many callers it names in requested_by
-- (gateway:billing/caller:…): whether op_key is this login's effect made
-- under another requested_by. Then the call is kept, flagged, as a refused
-- attempt, and the gateway answers its caller nothing of the effect and
-- does not call begin_effect — whose retry would reopen the other caller's
-- failed effect before the gateway saw the answer. Only the login's own
-- keys are looked at: another login's is begin_effect's to refuse.
create or replace function ledger.refused_to_requester(op_key text, requested_by text, request_id text default null)
returns boolean
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    ignored text;
    existing ledger.effects;
    made_by text;
begin
    ignored := ledger.forget_caller_settings();
    select e.* into existing from ledger.effects e
     where e.op_key = refused_to_requester.op_key and e.owner_role = session_user::text;
    if found then
        made_by := existing.requested_by;
    else
        select t.requested_by into made_by from ledger.key_tombstones t
         where t.op_key = refused_to_requester.op_key and t.owner_role = session_user::text;
    end if;
    if made_by is null or made_by = refused_to_requester.requested_by then
        return false;
    end if;
    if existing.id is not null then
        perform ledger.record_attempt(existing, 'refused', refused_to_requester.requested_by,
            refused_to_requester.request_id, null,
            detail => jsonb_build_object('call', 'begin_effect', 'login', session_user::text,
                                         'owner_role', existing.owner_role, 'made_by', made_by,
                                         'refused', 'another requester''s key'),
            flagged => true);
    end if;
    return true;
end
$$;

revoke all on function ledger.refused_to_requester(text,text,text) from public;
grant execute on function ledger.refused_to_requester(text,text,text) to effect_agent;
