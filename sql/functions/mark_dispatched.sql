-- Claims a pending effect for dispatch. Exactly one caller gets claimed =
-- true; everyone else must not call the provider. A call from a login that
-- does not own the effect gets claimed = false and the reason in refused.
-- A caller that beats names its lease; the claim starts the lease in force
-- (the action's policy may set another) and answers it, for the beats.
create or replace function ledger.mark_dispatched(
    op_key     text,
    request_id text default null,
    worker     text default null,
    target     text default null,
    heartbeat_lease interval default null
) returns table (claimed boolean, state text, deadline_at timestamptz, refused text, lease_in_force interval)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    ignored  text;
    effect   ledger.effects;
    refusal  text;
    approval ledger.approvals;
    lapse    text;
    claim    record;
    lease    interval;
begin
    ignored := ledger.forget_caller_settings();
    -- A lease the ledger would refuse is refused before anything is claimed.
    if mark_dispatched.heartbeat_lease is not null then
        perform ledger.check_lease(mark_dispatched.heartbeat_lease);
    end if;
    effect := ledger.effect_for_writer(mark_dispatched.op_key);
    refusal := coalesce(ledger.writer_refusal(effect, 'dispatch'),
                        ledger.target_refusal(effect, mark_dispatched.target));
    if refusal is not null then
        perform ledger.record_refusal(effect, 'mark_dispatched', refusal,
                                      mark_dispatched.worker, mark_dispatched.request_id);
        return query select false, effect.state, effect.deadline_at, refusal, null::interval;
        return;
    end if;
    -- An approval that expired, was revoked or superseded since begin
    -- (between attempts, say) stops the dispatch: the effect is cancelled.
    if effect.approval_ref is not null and effect.state = 'pending' and effect.dispatched_at is null then
        approval := ledger.lock_approval(effect.approval_ref, effect.approval_version);
        lapse := ledger.approval_refusal(approval, effect.approval_ref, effect.approval_version, false,
                     effect.action, effect.target, effect.amount_minor, effect.currency,
                     effect.params_hash, effect.id);
        if lapse is not null then
            perform set_config('ledger.actor', coalesce(mark_dispatched.worker, effect.requested_by), true);
            perform set_config('ledger.reason', lapse || ': not dispatched', true);
            update ledger.effects e set state = 'cancelled', failure_reason = lapse
             where e.id = effect.id returning e.* into effect;
            perform ledger.record_attempt(effect, 'dispatch_refused', mark_dispatched.worker,
                mark_dispatched.request_id, null, detail => jsonb_build_object('approval', lapse),
                flagged => true);
            return query select false, effect.state, effect.deadline_at, lapse, null::interval;
            return;
        end if;
    end if;
    select c.* into claim from ledger.claim_dispatch(effect, mark_dispatched.request_id, mark_dispatched.worker) c;
    if claim.claimed and mark_dispatched.heartbeat_lease is not null then
        lease := ledger.lease_in_force(effect.action, mark_dispatched.heartbeat_lease);
        perform ledger.start_lease(effect.id, mark_dispatched.worker, lease);
    end if;
    return query select claim.claimed, claim.state, claim.deadline_at, null::text, lease;
end
$$;

revoke all on function ledger.mark_dispatched(text,text,text,text,interval) from public;
grant execute on function ledger.mark_dispatched(text,text,text,text,interval) to effect_agent;
