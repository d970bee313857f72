-- The answer to a caller the key is not answered to: the decision alone.
-- The call is kept, flagged, on the effect (a pruned key's tombstone counts
-- it among its replays instead: its effect is gone).
create or replace function ledger.refused_answer(
    effect ledger.effects, withheld text, requested_by text, request_id text, params_hash text,
    refusal text
) returns ledger.begin_answer
language plpgsql
as $$
begin
    if effect.id is not null then
        perform ledger.record_attempt(effect, 'refused', refused_answer.requested_by,
            refused_answer.request_id, refused_answer.params_hash,
            detail => jsonb_build_object('call', 'begin_effect', 'login', session_user::text,
                                         'owner_role', effect.owner_role, 'refused', refusal,
                                         'withheld', withheld),
            flagged => true);
    end if;
    return ('refused'::text, null::bigint, null::text, null::jsonb)::ledger.begin_answer;
end
$$;

revoke all on function ledger.refused_answer(ledger.effects,text,text,text,text,text) from public;
