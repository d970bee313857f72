create or replace function ledger.begin_and_dispatch(
    op_key           text,
    action           text,
    target           text,
    params           jsonb,
    requested_by     text,
    pending_window   interval default null,
    amount_minor     bigint   default null,
    currency         text     default null,
    provider         text     default null,
    approval_ref     text     default null,
    approval_version integer  default null,
    request_id       text     default null,
    during           tstzrange default null,
    worker           text     default null,
    as_requester     boolean  default false,
    dispatch         boolean  default true,
    heartbeat_lease  interval default null
) returns ledger.dispatch_answer
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    ignored text;
    answer ledger.begin_answer;
    claim record;
    claimed_effect ledger.effects;
    lease interval;
    refused_answer constant ledger.dispatch_answer :=
        ('refused', null, null, null, false, null, null, null)::ledger.dispatch_answer;
begin
    ignored := ledger.forget_caller_settings();
    if begin_and_dispatch.as_requester
       and ledger.refused_to_requester(begin_and_dispatch.op_key, begin_and_dispatch.requested_by,
                                       begin_and_dispatch.request_id) then
        return refused_answer;
    end if;
    answer := ledger.begin_checked(
        op_key => begin_and_dispatch.op_key, action => begin_and_dispatch.action,
        target => begin_and_dispatch.target, params => begin_and_dispatch.params,
        requested_by => begin_and_dispatch.requested_by, pending_window => begin_and_dispatch.pending_window,
        amount_minor => begin_and_dispatch.amount_minor, currency => begin_and_dispatch.currency,
        provider => begin_and_dispatch.provider, approval_ref => begin_and_dispatch.approval_ref,
        approval_version => begin_and_dispatch.approval_version, request_id => begin_and_dispatch.request_id,
        during => begin_and_dispatch.during,
        claim => begin_and_dispatch.dispatch, worker => begin_and_dispatch.worker);
    if answer.decision is null or answer.decision = 'refused' then
        return refused_answer;
    end if;
    -- Another caller of this login made the key while this one asked.
    if begin_and_dispatch.as_requester and answer.decision not in ('proceed', 'claimed', 'overlap')
       and ledger.refused_to_requester(begin_and_dispatch.op_key, begin_and_dispatch.requested_by,
                                       begin_and_dispatch.request_id) then
        if answer.decision = 'retry' then
            perform ledger.complete_effect(
                op_key => begin_and_dispatch.op_key, outcome => 'failed', retryable => true,
                reason => 'not sent: reopened by another caller''s call, which was refused',
                request_id => begin_and_dispatch.request_id, worker => begin_and_dispatch.worker,
                target => begin_and_dispatch.target);
        end if;
        return refused_answer;
    end if;
    -- A new key, claimed as it was created: the rest of claim_dispatch's
    -- work, its attempt and the lease.
    if answer.decision = 'claimed' then
        claimed_effect.id := answer.effect_id;
        claimed_effect.op_key := begin_and_dispatch.op_key;
        perform ledger.record_attempt(claimed_effect, 'dispatch', begin_and_dispatch.worker,
                                      begin_and_dispatch.request_id, null);
        if begin_and_dispatch.heartbeat_lease is not null then
            -- Refused, it undoes the claim with everything else: one statement.
            perform ledger.check_lease(begin_and_dispatch.heartbeat_lease);
            lease := ledger.lease_in_force(ledger.action_name(begin_and_dispatch.action), begin_and_dispatch.heartbeat_lease);
            perform ledger.start_lease(answer.effect_id, begin_and_dispatch.worker, lease);
        end if;
        return ('proceed', answer.effect_id, answer.state, null, true, null, null, lease)::ledger.dispatch_answer;
    end if;
    if answer.decision in ('proceed', 'retry') and begin_and_dispatch.dispatch then
        select c.claimed, c.state, c.refused, c.lease_in_force into claim
          from ledger.mark_dispatched(op_key => begin_and_dispatch.op_key,
                                      request_id => begin_and_dispatch.request_id,
                                      worker => begin_and_dispatch.worker,
                                      target => begin_and_dispatch.target,
                                      heartbeat_lease => begin_and_dispatch.heartbeat_lease) c;
        return (answer.decision, answer.effect_id, claim.state, answer.result, claim.claimed, claim.refused,
                null, claim.lease_in_force)::ledger.dispatch_answer;
    end if;
    if answer.decision = 'rejected' then
        return (answer.decision, answer.effect_id, answer.state, answer.result, false, null,
                ledger.rejected_differences(begin_and_dispatch.op_key, begin_and_dispatch.action,
                    begin_and_dispatch.target, coalesce(begin_and_dispatch.params, '{}'::jsonb),
                    begin_and_dispatch.amount_minor, begin_and_dispatch.currency,
                    begin_and_dispatch.provider), null)::ledger.dispatch_answer;
    end if;
    return (answer.decision, answer.effect_id, answer.state, answer.result, false, null, null, null)::ledger.dispatch_answer;
end
$$;

revoke all on function ledger.begin_and_dispatch(text,text,text,jsonb,text,interval,bigint,text,text,text,integer,text,tstzrange,text,boolean,boolean,interval) from public;
grant execute on function ledger.begin_and_dispatch(text,text,text,jsonb,text,interval,bigint,text,text,text,integer,text,tstzrange,text,boolean,boolean,interval) to effect_agent;
