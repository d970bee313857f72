-- Claims a locked effect for dispatch: the agent's mark_dispatched and the
-- operator's op_dispatch_compensation both end here. Not granted to anyone.
create or replace function ledger.claim_dispatch(effect ledger.effects, request_id text, worker text)
returns table (claimed boolean, state text, deadline_at timestamptz)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    ignored text;
begin
    -- Plain expressions and RETURN NEXT on the path every effect takes (0004).
    ignored := set_config('ledger.actor', coalesce(claim_dispatch.worker, effect.requested_by), true);

    if effect.state = 'pending' and effect.dispatched_at is null then
        update ledger.effects e
           set dispatched_at = now(), dispatched_by = claim_dispatch.worker,
               dispatched_role = session_user,
               request_id = coalesce(claim_dispatch.request_id, e.request_id),
               deadline_at = now() + e.pending_window
         where e.id = effect.id
        returning e.* into effect;
        perform ledger.record_attempt(effect, 'dispatch', claim_dispatch.worker,
            claim_dispatch.request_id, null);
        claimed := true;
        state := effect.state;
        deadline_at := effect.deadline_at;
        return next;
    else
        perform ledger.record_attempt(effect, 'dispatch_refused', claim_dispatch.worker,
            claim_dispatch.request_id, null,
            detail => jsonb_build_object('state', effect.state,
                                         'already_dispatched_at', effect.dispatched_at));
        return query select false, effect.state, effect.deadline_at;
    end if;
end
$$;

revoke all on function ledger.claim_dispatch(ledger.effects,text,text) from public;
