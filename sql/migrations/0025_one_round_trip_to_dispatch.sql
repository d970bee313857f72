-- One round trip from a call to its dispatch, and a rejected call's
-- differences said by the ledger.
--
-- A caller that calls the provider as soon as the ledger lets it (the MCP
-- gateway; a client's decorated tool with nothing to validate first) made
-- two durable commits before the provider call: begin_effect, then
-- mark_dispatched. Each waits for its WAL flush, and the two were most of
-- what the gateway added to a tool call. begin_and_dispatch is the two in
-- one transaction: begin_effect's answer, and for proceed or retry the
-- claim mark_dispatched makes — exactly the functions a two-call caller
-- runs, so every rule, refusal, attempt and audit entry is the same. Other
-- callers of the key wait on the row lock until it commits, then see the
-- effect dispatched (in_flight), as they saw it between the two calls.
--
-- A rejected call (the key was made with other terms) is answered with
-- what differs, field by field, as [{field, recorded, now}]: the gateway
-- and both clients each read the effect back and compared it themselves,
-- three ways. Only the key's owner (or its tenant) hears it: a foreign
-- login's answer is `refused` before this point (0023), and nothing of the
-- effect is told. Numbers compare by value (1500 is 1500.0, as 0022 keys).
--
-- dispatch => false: begin_effect alone, for a caller that has something
-- to check before it calls the provider, still answered a rejected call's
-- differences.
--
-- as_requester: the gateway's `replays = "caller"` (0023's
-- refused_to_requester, asked before and, for any answer about an existing
-- key, after). A retry this call made of another caller's failed effect is
-- put back failed and retryable, unsent, in the same transaction.

create function ledger.rejected_differences(
    op_key text, action text, target text, params jsonb, amount_minor bigint, currency text,
    provider text
) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    with recorded as (
        select e.* from ledger.effects e where e.op_key = rejected_differences.op_key
    ), terms(position, field, was, now) as (
        select 1, 'action', to_jsonb(r.action), to_jsonb(lower(btrim(rejected_differences.action))) from recorded r
        union all
        select 2, 'target', to_jsonb(r.target), to_jsonb(rejected_differences.target) from recorded r
        union all
        select 3, 'amount_minor', to_jsonb(r.amount_minor), to_jsonb(rejected_differences.amount_minor) from recorded r
        union all
        select 4, 'currency', to_jsonb(r.currency), to_jsonb(upper(rejected_differences.currency)) from recorded r
        union all
        select 5, 'provider', to_jsonb(r.provider), to_jsonb(rejected_differences.provider) from recorded r
        union all
        select 6, 'params.' || name, r.params -> name, rejected_differences.params -> name
          from recorded r,
               lateral (select jsonb_object_keys(case when jsonb_typeof(r.params) = 'object' then r.params
                                                      else '{}'::jsonb end)
                        union
                        select jsonb_object_keys(case when jsonb_typeof(rejected_differences.params) = 'object'
                                                      then rejected_differences.params else '{}'::jsonb end)) k(name)
    )
    select coalesce(jsonb_agg(jsonb_build_object('field', field,
                                                 'recorded', coalesce(was, 'null'::jsonb),
                                                 'now', coalesce(now, 'null'::jsonb))
                              order by position, field), '[]'::jsonb)
      from terms
     where coalesce(was, 'null'::jsonb) is distinct from coalesce(now, 'null'::jsonb)
$$;

create type ledger.dispatch_answer as (
    decision text, effect_id bigint, state text, result jsonb,
    -- Whether this call claimed the effect: only then may it call the provider.
    dispatched boolean,
    -- Why the claim was refused (an approval that lapsed, another login).
    refused text,
    -- A rejected call's terms that differ from the recorded ones.
    differences jsonb
);

create function ledger.begin_and_dispatch(
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
    dispatch         boolean  default true
) returns ledger.dispatch_answer
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    ignored text;
    answer ledger.begin_answer;
    claim record;
    refused_answer constant ledger.dispatch_answer :=
        ('refused', null, null, null, false, null, null)::ledger.dispatch_answer;
begin
    ignored := ledger.forget_caller_settings();
    if begin_and_dispatch.as_requester
       and ledger.refused_to_requester(begin_and_dispatch.op_key, begin_and_dispatch.requested_by,
                                       begin_and_dispatch.request_id) then
        return refused_answer;
    end if;
    answer := ledger.begin_effect(
        op_key => begin_and_dispatch.op_key, action => begin_and_dispatch.action,
        target => begin_and_dispatch.target, params => begin_and_dispatch.params,
        requested_by => begin_and_dispatch.requested_by, pending_window => begin_and_dispatch.pending_window,
        amount_minor => begin_and_dispatch.amount_minor, currency => begin_and_dispatch.currency,
        provider => begin_and_dispatch.provider, approval_ref => begin_and_dispatch.approval_ref,
        approval_version => begin_and_dispatch.approval_version, request_id => begin_and_dispatch.request_id,
        during => begin_and_dispatch.during);
    if answer.decision is null or answer.decision = 'refused' then
        return refused_answer;
    end if;
    -- Another caller of this login made the key while this one asked.
    if begin_and_dispatch.as_requester and answer.decision not in ('proceed', 'overlap')
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
    if answer.decision in ('proceed', 'retry') and begin_and_dispatch.dispatch then
        select c.claimed, c.state, c.refused into claim
          from ledger.mark_dispatched(op_key => begin_and_dispatch.op_key,
                                      request_id => begin_and_dispatch.request_id,
                                      worker => begin_and_dispatch.worker,
                                      target => begin_and_dispatch.target) c;
        return (answer.decision, answer.effect_id, claim.state, answer.result, claim.claimed, claim.refused,
                null)::ledger.dispatch_answer;
    end if;
    if answer.decision = 'rejected' then
        return (answer.decision, answer.effect_id, answer.state, answer.result, false, null,
                ledger.rejected_differences(begin_and_dispatch.op_key, begin_and_dispatch.action,
                    begin_and_dispatch.target, coalesce(begin_and_dispatch.params, '{}'::jsonb),
                    begin_and_dispatch.amount_minor, begin_and_dispatch.currency,
                    begin_and_dispatch.provider))::ledger.dispatch_answer;
    end if;
    return (answer.decision, answer.effect_id, answer.state, answer.result, false, null, null)::ledger.dispatch_answer;
end
$$;

revoke execute on function
    ledger.rejected_differences(text, text, text, jsonb, bigint, text, text),
    ledger.begin_and_dispatch(text, text, text, jsonb, text, interval, bigint, text, text, text, integer, text,
                              tstzrange, text, boolean, boolean)
    from public;
grant execute on function
    ledger.begin_and_dispatch(text, text, text, jsonb, text, interval, bigint, text, text, text, integer, text,
                              tstzrange, text, boolean, boolean)
    to effect_agent;
