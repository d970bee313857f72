-- The four branches of the writer API, for an agent (through begin_effect)
-- and for the ledger's own compensations. Not granted to anyone.
create or replace function ledger.open_effect(
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
    during           tstzrange default null
) returns ledger.begin_answer
language plpgsql
as $$
#variable_conflict use_column
declare
    offered_params jsonb := coalesce(open_effect.params, '{}'::jsonb);
    offered_hash   text;
    policy         ledger.action_policies;
    existing       ledger.effects;
    -- What the insert returns: only what is read of it after, not the
    -- whole row (a RETURNING list is projected on every begin).
    created        record;
    tombstone      ledger.key_tombstones;
    approval       ledger.approvals;
    refusal        text;
    booked         ledger.effects;
    window_length  interval;
    ignored        text;
    first_try      boolean;
begin
    -- One condition for the four, which every call passes; which one
    -- failed is sorted out only when one did.
    -- Blank is missing: a key or a name of spaces only names nothing.
    if coalesce(btrim(open_effect.op_key), '') = '' or coalesce(btrim(open_effect.action), '') = ''
       or coalesce(btrim(open_effect.target), '') = '' or coalesce(btrim(open_effect.requested_by), '') = ''
       or jsonb_typeof(offered_params) <> 'object' then
        if coalesce(btrim(open_effect.op_key), '') = '' then
            raise exception 'ledger: op_key is required and may not be blank' using errcode = 'invalid_parameter_value';
        end if;
        if coalesce(btrim(open_effect.action), '') = '' or coalesce(btrim(open_effect.target), '') = '' then
            raise exception 'ledger: action and target are required and may not be blank (key %)', open_effect.op_key
                using errcode = 'invalid_parameter_value';
        end if;
        if coalesce(btrim(open_effect.requested_by), '') = '' then
            raise exception 'ledger: requested_by is required and may not be blank (key %)', open_effect.op_key
                using errcode = 'invalid_parameter_value';
        end if;
        raise exception 'ledger: params must be a JSON object (key %)', open_effect.op_key
            using errcode = 'invalid_parameter_value';
    end if;
    offered_hash := ledger.params_hash(offered_params);
    ignored := set_config('ledger.actor', open_effect.requested_by, true);

    -- One caller at a time per target: conflict detection and creation must
    -- see each other, and callers of one key converge here without ever
    -- surfacing a unique violation.
    ignored := pg_advisory_xact_lock(hashtextextended('ledger.target:' || open_effect.target, 0))::text;

    policy := ledger.policy_for(open_effect.action);
    -- An action nobody wrote a policy for gets the defaults, unless the
    -- ledger says unknown actions are refused (a misspelt or invented name
    -- would otherwise escape every rule of the real one).
    if policy.updated_at is null
       and (select s.unknown_actions from ledger.ledger_settings s) = 'refuse' then
        raise exception 'ledger: action % has no policy and this ledger refuses unknown actions (key %)',
            open_effect.action, open_effect.op_key
            using errcode = 'invalid_parameter_value',
                  hint = 'use an action with a policy (effectwatch policy list), or have an operator set one';
    end if;
    -- A key that names no approval and no booking range is, nearly always,
    -- new: it is first tried by the one insert below, which creates it only
    -- if no effect and no tombstone holds the key. Whatever that finds is
    -- answered on the full path of the next turn.
    first_try := open_effect.approval_ref is null and open_effect.during is null
                 and not policy.conflicts_by_time_range and not policy.approvals_must_be_registered;
    loop
        if not first_try then
            select e.* into existing from ledger.effects e
             where e.op_key = open_effect.op_key
             for update;

            if found then
                -- The amount, currency and provider are as material as the
                -- params: a retry that changes any of them is another intent.
                if existing.params_hash <> offered_hash
                   or existing.action <> open_effect.action
                   or existing.target <> open_effect.target
                   or existing.amount_minor is distinct from open_effect.amount_minor
                   or existing.currency is distinct from upper(open_effect.currency)
                   or existing.provider is distinct from open_effect.provider
                   or existing.during is distinct from open_effect.during then
                    perform ledger.record_attempt(existing, 'mismatch', open_effect.requested_by,
                        open_effect.request_id, offered_hash, offered_params,
                        jsonb_build_object('action', open_effect.action, 'target', open_effect.target,
                                           'amount_minor', open_effect.amount_minor,
                                           'currency', upper(open_effect.currency),
                                           'provider', open_effect.provider,
                                           'during', open_effect.during::text),
                        true);
                    return ('rejected'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
                end if;

                case existing.state
                when 'succeeded' then
                    perform ledger.record_attempt(existing, 'replay', open_effect.requested_by,
                        open_effect.request_id, offered_hash);
                    return ('replay'::text, existing.id, existing.state, existing.result)::ledger.begin_answer;
                when 'pending', 'unknown' then
                    -- Released from its hold (by rule or by an operator) and
                    -- never dispatched: the first call after the release
                    -- proceeds, as the held call would have; one at a time,
                    -- on the hold's row, so the calls after it are in flight.
                    if existing.state = 'pending' and existing.dispatched_at is null
                       and ledger.writer_refusal(existing, 'dispatch') is null then
                        update ledger.holds h set answered_at = now()
                         where h.effect_id = existing.id and h.closed_how = 'released' and h.answered_at is null;
                        if found then
                            perform ledger.record_attempt(existing, 'released', open_effect.requested_by,
                                open_effect.request_id, offered_hash);
                            return ('proceed'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
                        end if;
                    end if;
                    -- The provider deduplicates by our key: an unknown outcome
                    -- is settled by sending the same request again.
                    -- Only its own login reopens an effect: another fleet's
                    -- agent with the same key is told it is in flight.
                    if existing.state = 'unknown' and existing.attention is null
                       and (ledger.policy_for(existing.action)).retry_semantics = 'safe_retry'
                       and ledger.writer_refusal(existing, 'retry') is null then
                        perform set_config('ledger.reason', 'safe retry of an unknown outcome under the same key', true);
                        update ledger.effects e
                           set state = 'pending', dispatched_at = null, dispatched_by = null,
                               failure_reason = null, error_class = null,
                               request_id = coalesce(open_effect.request_id, e.request_id),
                               deadline_at = now() + e.pending_window
                         where e.id = existing.id;
                        perform ledger.record_attempt(existing, 'retry', open_effect.requested_by,
                            open_effect.request_id, offered_hash,
                            detail => jsonb_build_object('safe_retry_of', 'unknown'));
                        return ('retry'::text, existing.id, 'pending'::text, null::jsonb)::ledger.begin_answer;
                    end if;
                    perform ledger.record_attempt(existing, 'in_flight', open_effect.requested_by,
                        open_effect.request_id, offered_hash);
                    return ('in_flight'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
                when 'held' then
                    perform ledger.record_attempt(existing, 'held', open_effect.requested_by,
                        open_effect.request_id, offered_hash);
                    return ('held'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
                when 'failed' then
                    if coalesce(existing.retryable, false) and existing.retry_not_before > now() then
                        -- Rate limited: the same key, once the provider's delay is over.
                        perform ledger.record_attempt(existing, 'wait', open_effect.requested_by,
                            open_effect.request_id, offered_hash,
                            detail => jsonb_build_object('retry_not_before', existing.retry_not_before));
                        return ('wait'::text, existing.id, existing.state,
                            jsonb_build_object('retry_after_seconds',
                                ceil(extract(epoch from existing.retry_not_before - now()))::integer))::ledger.begin_answer;
                    end if;
                    refusal := ledger.writer_refusal(existing, 'retry');
                    if coalesce(existing.retryable, false) and refusal is not null then
                        -- Only its own login reopens an effect.
                        perform ledger.record_attempt(existing, 'refused', open_effect.requested_by,
                            open_effect.request_id, offered_hash,
                            detail => jsonb_build_object('refused', refusal), flagged => true);
                        return ('rejected'::text, existing.id, existing.state,
                            jsonb_build_object('refused', refusal))::ledger.begin_answer;
                    end if;
                    if coalesce(existing.retryable, false) and policy.conflicts_by_time_range then
                        -- A booking retried after another took an overlapping
                        -- range would be a second booking of that time.
                        select e.* into booked from ledger.effects e
                         where e.target = existing.target and e.action = existing.action
                           and e.id <> existing.id and e.state = 'succeeded' and e.during && existing.during
                         limit 1;
                        if found then
                            perform ledger.record_attempt(booked, 'overlap', open_effect.requested_by,
                                open_effect.request_id, offered_hash, offered_params,
                                jsonb_build_object('op_key', existing.op_key, 'during', existing.during::text));
                            return ('overlap'::text, booked.id, booked.state,
                                jsonb_build_object('overlaps', booked.op_key, 'during', booked.during::text))::ledger.begin_answer;
                        end if;
                    end if;
                    if coalesce(existing.retryable, false) then
                        -- Another key may have proceeded on this target since the
                        -- failure: retrying now would make two open effects on an
                        -- exclusive target (under a time-range policy: on an
                        -- overlapping range). Wait, as a new key would be held.
                        if (policy.exclusive_per_target or policy.conflicts_by_time_range)
                           and exists (select 1 from ledger.effects e
                                        where e.target = existing.target and e.action = existing.action
                                          and e.id <> existing.id
                                          and e.state in ('pending', 'unknown', 'held')
                                          and (not policy.conflicts_by_time_range
                                               or e.during && existing.during)) then
                            perform ledger.record_attempt(existing, 'held', open_effect.requested_by,
                                open_effect.request_id, offered_hash,
                                detail => jsonb_build_object('retry_blocked_by_open_effect_on_target', true));
                            return ('held'::text, existing.id, existing.state, null::jsonb)::ledger.begin_answer;
                        end if;
                        perform set_config('ledger.reason', 'retry under the same key', true);
                        update ledger.effects e
                           set state = 'pending', dispatched_at = null, dispatched_by = null,
                               failure_reason = null, retryable = null, error_class = null,
                               retry_not_before = null,
                               request_id = coalesce(open_effect.request_id, e.request_id),
                               deadline_at = now() + e.pending_window
                         where e.id = existing.id;
                        perform ledger.record_attempt(existing, 'retry', open_effect.requested_by,
                            open_effect.request_id, offered_hash);
                        return ('retry'::text, existing.id, 'pending'::text, null::jsonb)::ledger.begin_answer;
                    else
                        perform ledger.record_attempt(existing, 'stop', open_effect.requested_by,
                            open_effect.request_id, offered_hash);
                        return ('stop'::text, existing.id, existing.state, existing.result)::ledger.begin_answer;
                    end if;
                else
                    -- compensated or cancelled: the intent is closed for good.
                    perform ledger.record_attempt(existing, 'stop', open_effect.requested_by,
                        open_effect.request_id, offered_hash);
                    return ('stop'::text, existing.id, existing.state, existing.result)::ledger.begin_answer;
                end case;
            end if;

            -- A key whose effect was pruned is answered as it was before the
            -- prune: a replay weeks later must never refund twice.
            update ledger.key_tombstones t
               set replays = t.replays + 1, last_replay_at = now()
             where t.op_key = open_effect.op_key
            returning t.* into tombstone;
            if found then
                if tombstone.material_hash <> ledger.material_hash(
                       offered_hash, open_effect.action, open_effect.target, open_effect.amount_minor,
                       upper(open_effect.currency), open_effect.provider, open_effect.during) then
                    return ('rejected'::text, tombstone.effect_id, tombstone.final_state, null::jsonb)::ledger.begin_answer;
                elsif tombstone.final_state = 'succeeded' then
                    return ('replay'::text, tombstone.effect_id, tombstone.final_state, tombstone.result)::ledger.begin_answer;
                else
                    return ('stop'::text, tombstone.effect_id, tombstone.final_state, tombstone.result)::ledger.begin_answer;
                end if;
            end if;

            -- The approval a new key names must authorise it now (0016).
            approval := ledger.lock_approval(open_effect.approval_ref, open_effect.approval_version);
            refusal := ledger.approval_refusal(approval, open_effect.approval_ref, open_effect.approval_version,
                           policy.approvals_must_be_registered, open_effect.action, open_effect.target,
                           open_effect.amount_minor, upper(open_effect.currency), offered_hash, null,
                           policy.compensation_approval_limit_minor);
            if policy.conflicts_by_time_range then
                if open_effect.during is null or isempty(open_effect.during) then
                    raise exception 'ledger: % conflicts by time range: begin_effect needs its range (during) (key %)',
                        open_effect.action, open_effect.op_key
                        using errcode = 'invalid_parameter_value';
                end if;
                -- A range that overlaps a booking already made is not a retry
                -- of it but a second booking: refused, and the attempt is kept
                -- on the booking it would have doubled.
                select e.* into booked from ledger.effects e
                 where e.target = open_effect.target and e.action = open_effect.action
                   and e.state = 'succeeded' and e.during && open_effect.during
                 limit 1;
                if found and refusal is null then
                    perform ledger.record_attempt(booked, 'overlap', open_effect.requested_by,
                        open_effect.request_id, offered_hash, offered_params,
                        jsonb_build_object('op_key', open_effect.op_key, 'during', open_effect.during::text));
                    return ('overlap'::text, booked.id, booked.state,
                        jsonb_build_object('overlaps', booked.op_key, 'during', booked.during::text))::ledger.begin_answer;
                end if;
            end if;
        end if;

        window_length := coalesce(open_effect.pending_window, policy.pending_window);
        insert into ledger.effects as e (
            op_key, action, target, params, params_hash, amount_minor, currency, provider,
            requested_by, owner_role, approval_ref, approval_version, request_id, state, pending_window,
            deadline_at, held_by, during, double_candidate)
        select
            open_effect.op_key, open_effect.action, open_effect.target, offered_params, offered_hash,
            open_effect.amount_minor, upper(open_effect.currency), open_effect.provider,
            open_effect.requested_by, session_user, open_effect.approval_ref, open_effect.approval_version,
            open_effect.request_id,
            case when holder_id is null then 'pending' else 'held' end,
            window_length, now() + window_length,
            holder_id,
            -- A refused key keeps no time: it must not stand in a booking's way.
            case when refusal is null then open_effect.during end,
            -- The target lock above makes "another exists" exact: no
            -- second effect of this target and action can begin meanwhile.
            exists (select 1 from ledger.effects x
                     where x.target = open_effect.target and x.action = open_effect.action)
            or coalesce(open_effect.amount_minor > ledger.approved_amount(offered_params), false)
          from (select 1) one
          -- A held effect points at the open one actually in the way: the
          -- oldest pending or unknown one, else the oldest held one (what
          -- that one was held by may be settled by now); under a time-range
          -- policy, the oldest that overlaps.
          left join lateral (
                select h.id as holder_id from ledger.effects h
                 where h.target = open_effect.target and h.action = open_effect.action
                   and h.state in ('pending', 'unknown', 'held')
                   and (not policy.conflicts_by_time_range or h.during && open_effect.during)
                 order by (h.state = 'held'), h.created_at
                 limit 1) holder
            on refusal is null and (policy.exclusive_per_target or policy.conflicts_by_time_range)
         -- On the first try these two are what the full path would have
         -- found; after it, they find what a racing caller made meanwhile.
         -- The conflict clause alone would not do for a taken key: the
         -- guard trigger checks the row, and the identity takes an id,
         -- before the conflict is found, so a repeat call whose arguments
         -- the row's checks refuse would fail instead of being answered.
         where not exists (select 1 from ledger.effects k where k.op_key = open_effect.op_key)
           and not exists (select 1 from ledger.key_tombstones t where t.op_key = open_effect.op_key)
        on conflict on constraint effects_op_key_key do nothing
        returning e.id, e.state, e.held_by, e.target into created;

        -- A new key, pending, on the first try: what nearly every call is,
        -- answered by one condition.
        if found and created.state = 'pending' and first_try then
            return ('proceed', created.id, created.state, null::jsonb)::ledger.begin_answer;
        end if;
        if found and refusal is not null then
            -- Refused, and kept: the key, who asked and why it was refused
            -- are a fact of the ledger; the key stays closed (stop).
            perform set_config('ledger.reason', refusal, true);
            update ledger.effects e set state = 'cancelled', failure_reason = refusal
             where e.id = created.id;
            return ('rejected'::text, created.id, 'cancelled'::text,
                                jsonb_build_object('refused', refusal))::ledger.begin_answer;
        end if;
        if found and approval.approval_ref is not null then
            update ledger.approvals a set consumed_by = created.id, consumed_at = now()
             where a.approval_ref = approval.approval_ref and a.version = approval.version;
        end if;
        if found then
            -- The first call is the effect row itself (requester, request id,
            -- params hash) and its creation event: attempts record the calls
            -- that come after, and an extra row per effect would cost every
            -- writer a fifth of its throughput for no new fact.
            if created.state = 'held' then
                insert into ledger.holds (effect_id, holder_id, target)
                values (created.id, created.held_by, created.target);
                return ('held'::text, created.id, created.state, null::jsonb)::ledger.begin_answer;
            else
                return ('proceed', created.id, created.state, null::jsonb)::ledger.begin_answer;
            end if;
        end if;
        -- The key is taken (or was pruned), found on the first try or made
        -- by a racing caller under another target lock: the full path
        -- answers it.
        first_try := false;
    end loop;
end
$$;

revoke all on function ledger.open_effect(text,text,text,jsonb,text,interval,bigint,text,text,text,integer,text,tstzrange) from public;
