-- Heartbeats: a dead worker told from a slow one in seconds.
--
-- A worker killed after dispatch left its effect pending and dispatched
-- until its pending window ended (minutes): the ledger could not tell a
-- dead worker from a slow one, and a repeat of the key meanwhile was told
-- in_flight. A worker that beats while its provider call runs holds a short
-- lease on the effect; when the beats stop for longer than the lease, the
-- effect is unknown (error class worker_lost) — at once in every view, and
-- written so by the next reconciler pass, operator call or beat that meets
-- it, then reconciled like any unknown. A slow call that keeps beating is
-- never touched. Effects nobody beats for keep the window's rule.
--
-- A beat moves the lease and nothing else: no version, no audit entry (a
-- call beating every few seconds would bury the audit trail). Its end is a
-- state change like any other, kept in the history and audited once.

create table ledger.worker_leases (
    effect_id     bigint primary key references ledger.effects (id) on delete cascade,
    worker        text,
    lease         interval not null,
    lease_until   timestamptz not null,
    beats         bigint not null default 1,
    first_beat_at timestamptz not null default now()
);

-- The ledger's own error class beside the workers': the guard restated
-- with worker_lost in its list, unchanged otherwise.
create or replace function ledger.effects_guard() returns trigger
language plpgsql as $$
declare
    broken text;
    kept   boolean;
    quiet  boolean;
begin
    if tg_op = 'UPDATE' then
        -- The one path out of unknown that is not a settlement: the action's
        -- provider deduplicates by our key (retry semantics safe_retry), so
        -- sending the same request again cannot make a second effect.
        if new.state is distinct from old.state
           and not ledger.transition_allowed(old.state, new.state,
                                             old.dispatched_at is not null, old.retryable)
           and not (old.state = 'unknown' and new.state = 'pending'
                    and (ledger.policy_for(old.action)).retry_semantics = 'safe_retry') then
            raise exception 'ledger: invalid transition for effect %: % -> %', old.op_key, old.state, new.state
                using errcode = 'check_violation',
                      hint = case
                          when old.state = 'pending' and new.state = 'cancelled'
                              then 'a dispatched effect cannot be cancelled: reconcile it'
                          when old.state = 'failed' and new.state = 'pending'
                              then 'the failure is not retryable'
                          else 'from ' || old.state || ' an effect may become: '
                               || coalesce(nullif(array_to_string(array(
                                      select s from unnest(array['pending', 'held', 'unknown', 'succeeded',
                                                                 'failed', 'compensated', 'cancelled']) s
                                       where ledger.transition_allowed(old.state, s, old.dispatched_at is not null,
                                                                      old.retryable)), ', '), ''),
                                      'nothing (it is final)') end;
        end if;

        -- Clearing dispatched_at would let mark_dispatched claim the effect a
        -- second time: only a retry (failed -> pending, or a safe retry of an
        -- unknown outcome, allowed above) starts a new dispatch.
        if old.dispatched_at is not null and new.dispatched_at is null
           and not (old.state in ('failed', 'unknown') and new.state = 'pending') then
            raise exception 'ledger: effect % was dispatched at %; that cannot be undone', old.op_key, old.dispatched_at
                using errcode = 'check_violation';
        end if;
    end if;

    -- The row's checks (0001), on every write, after the rules of the
    -- state machine: what a write may change.
    -- Null passes, as in a CHECK constraint (a CASE skips a null condition).
    broken := case
        when new.state not in ('pending', 'held', 'unknown', 'succeeded', 'failed', 'compensated', 'cancelled')
            then 'effects_state_check: state is one of pending, held, unknown, succeeded, failed, compensated, cancelled'
        when new.state = 'held' and new.held_by is null
            then 'effects_held_by_check: a held effect names the effect it is held by'
        when (new.amount_minor is null) <> (new.currency is null)
            then 'effects_amount_check: an amount is given with its currency, and a currency with its amount'
        when new.amount_minor < 0
            then 'effects_amount_sign_check: an amount is not negative (a reversal is an effect of its own)'
        when new.currency !~ '^[A-Z]{3}$'
            then 'effects_currency_check: a currency is three capital letters'
        when new.attention not in ('duplicate', 'mismatch')
            then 'effects_attention_check: attention is duplicate or mismatch'
        when new.error_class not in ('timeout', 'connection_reset', 'server_error', 'invalid_response',
                                     'business_rejection', 'rate_limited', 'worker_lost')
            then 'effects_error_class_check: error class is one of timeout, connection_reset, server_error, '
                 'invalid_response, business_rejection, rate_limited, worker_lost'
        when new.pending_window <= interval '0'
            then 'effects_pending_window_check: the pending window is positive'
        when isempty(new.during)
            then 'effects_during_check: a booking range is not empty'
    end;
    if broken is null and tg_op = 'INSERT' then
        -- Identity columns never change after the insert (above).
        broken := case
            when length(new.op_key) not between 1 and 512
                then 'effects_op_key_check: a key is 1 to 512 characters'
            when length(new.action) not between 1 and 128
                then 'effects_action_check: an action is 1 to 128 characters'
            when length(new.target) not between 1 and 512
                then 'effects_target_check: a target is 1 to 512 characters'
            when jsonb_typeof(new.params) <> 'object'
                then 'effects_params_check: params are a JSON object'
            -- Which one, only once one is found.
            when ledger.has_hidden_character_in(new.op_key, new.action, new.target)
                then case
                    when ledger.has_hidden_character(new.op_key)
                        then 'effects_op_key_visible: op_key has ' || ledger.hidden_character(new.op_key)
                    when ledger.has_hidden_character(new.action)
                        then 'effects_action_visible: action has ' || ledger.hidden_character(new.action)
                    else 'effects_target_visible: target has ' || ledger.hidden_character(new.target)
                end || ' (an invisible or control character)'
        end;
    end if;
    if broken is not null then
        raise exception 'ledger: effect refused by check %', broken
            using errcode = 'check_violation', schema = 'ledger', table = 'effects',
                  constraint = split_part(broken, ':', 1);
    end if;

    if tg_op = 'INSERT' then
        if new.state not in ('pending', 'held') then
            raise exception 'ledger: effect % cannot be created in state %', new.op_key, new.state
                using errcode = 'check_violation';
        end if;
        new.state_since := now();
        new.updated_at := now();
        new.latest_version_in_row := false;
        -- The version an effect is created with is a row of its own only
        -- when the row's creation columns cannot say it (0001): created
        -- pending now by its requester's login, due a window from now, with
        -- nothing else set and no reason given. Most effects are, and their
        -- writer is spared a history row.
        new.creation_version_stored := not (
            new.state = 'pending' and new.version = 1 and new.created_at = now()
            and new.deadline_at is not distinct from now() + new.pending_window
            and num_nulls(new.dispatched_at, new.external_ref, new.failure_reason, new.retryable,
                          new.late_result_at, new.attention, new.settled_at, new.held_by,
                          new.duplicates_acknowledged_at, new.error_class, new.retry_not_before) = 11
            and ledger.current_actor() = new.requested_by
            and new.owner_role = session_user::text
            and nullif(current_setting('ledger.reason', true), '') is null);
        return new;
    end if;

    new.version := old.version + 1;
    new.updated_at := now();
    if new.state is distinct from old.state then
        new.state_since := now();
    end if;
    if new.state is distinct from old.state
       and new.state in ('succeeded', 'failed', 'compensated', 'cancelled') then
        new.settled_at := now();
    elsif new.state in ('pending', 'held', 'unknown') then
        new.settled_at := null;
    end if;
    -- Here, with the row locked and final, rather than in an AFTER trigger:
    -- an AFTER trigger queues the row and reads it back at the end of the
    -- statement, for every writer call.
    -- Assigned, not PERFORMed: a plain expression starts no executor (0004).
    --
    -- The version this update supersedes becomes a row of its own if it was
    -- kept in the row (see latest_version_in_row in 0001): copied as the
    -- history view reads it from the row, which is where such a version is
    -- defined (the row is still as it was before this update).
    if old.latest_version_in_row then
        insert into ledger.effect_versions (
            effect_id, version, at, from_state, state, actor, db_role, reason, state_since,
            dispatched_at, deadline_at, external_ref, failure_reason, retryable, late_result_at,
            attention, settled_at, held_by, duplicates_acknowledged_at, error_class, retry_not_before)
        select h.effect_id, h.version, h.at, h.from_state, h.state, h.actor, h.db_role, h.reason,
               h.state_since, h.dispatched_at, h.deadline_at, h.external_ref, h.failure_reason,
               h.retryable, h.late_result_at, h.attention, h.settled_at, h.held_by,
               h.duplicates_acknowledged_at, h.error_class, h.retry_not_before
          from ledger.effect_history h
         where h.effect_id = old.id and h.version = old.version;
    end if;
    -- The new version stays in the row when the row can say it: a change
    -- from pending that no pane sees (so no console needs a word), made in
    -- the requester's own login, by whom and for the reason the row implies
    -- (ledger.default_actor, ledger.default_reason). Anything else, a worker
    -- named on an answer or a reason of its own, is a version row.
    quiet := ledger.changes_no_pane('UPDATE', old, new);
    new.latest_version_in_row :=
        quiet
        and ledger.current_actor() = ledger.default_actor(new.state, new.requested_by, new.dispatched_by)
        and session_user::text = new.owner_role
        and nullif(current_setting('ledger.reason', true), '')
            is not distinct from ledger.default_reason(new.state);
    if not new.latest_version_in_row then
        kept := ledger.keep_version(old.state, new, not quiet);
    end if;
    return new;
end
$$;

-- What a worker's silence means, said once for every place that says it.
create function ledger.worker_lost_reason(lease ledger.worker_leases) returns text
language sql stable as $$
    select format('no heartbeat from %s since %s (lease of %s): the worker is presumed lost mid-call',
                  coalesce((lease).worker, 'its worker'),
                  to_char(((lease).lease_until - (lease).lease) at time zone 'UTC',
                          'YYYY-MM-DD HH24:MI:SS"Z"'),
                  (lease).lease)
$$;

-- Every effect as it stood at T, where a dispatched effect whose worker's
-- lease had run out by T is unknown (worker_lost) from the lease's end,
-- whether or not that has been written yet: the panes, counts and `show`
-- learn of a dead worker the moment its lease ends. Its version is the
-- row's: an operator who acts on what was shown acts on that version, and
-- operator_begin writes the loss first.
--
-- Three branches, so that a view's condition on a column still reaches the
-- table's own column (and its partial index) for every row no lease
-- changes: rows as they are, rows a lease that ran out makes unknown (read
-- from the few leases), and the past's versions.
create or replace function ledger.effects_at(at_time timestamptz) returns setof ledger.effects
language sql stable as $$
    select e.* from ledger.effects e
     where (at_time is null or e.updated_at <= at_time)
       and not (e.state = 'pending' and e.dispatched_at is not null
                and exists (select 1 from ledger.worker_leases w
                             where w.effect_id = e.id and w.lease_until < ledger.instant(at_time)))
    union all
    select e.id, e.op_key, e.action, e.target, e.params, e.params_hash, e.amount_minor, e.currency,
           e.provider, e.requested_by, e.owner_role, e.approval_ref, e.approval_version,
           e.request_id, 'unknown', w.lease_until, e.pending_window, e.deadline_at, e.external_ref,
           e.result, ledger.worker_lost_reason(w), e.retryable, e.late_result_at, e.attention,
           e.version, e.created_at, e.dispatched_at, e.dispatched_by, e.dispatched_role,
           e.updated_at, e.settled_at, e.compensates, e.held_by, e.duplicates_acknowledged_at,
           'worker_lost', e.retry_not_before, e.during, e.double_candidate,
           e.creation_version_stored, e.latest_version_in_row
      from ledger.worker_leases w
      join ledger.effects e on e.id = w.effect_id
     where w.lease_until < ledger.instant(at_time)
       and e.state = 'pending' and e.dispatched_at is not null
       and (at_time is null or e.updated_at <= at_time)
    union all
    select s.id, s.op_key, s.action, s.target, s.params, s.params_hash, s.amount_minor, s.currency,
           s.provider, s.requested_by, s.owner_role, s.approval_ref, s.approval_version,
           s.request_id,
           case when lost.effect_id is null then s.state else 'unknown' end,
           case when lost.effect_id is null then s.state_since else lost.lease_until end,
           s.pending_window, s.deadline_at, s.external_ref, s.result,
           case when lost.effect_id is null then s.failure_reason
                else ledger.worker_lost_reason(lost) end,
           s.retryable, s.late_result_at, s.attention, s.version, s.created_at, s.dispatched_at,
           s.dispatched_by, s.dispatched_role, s.updated_at, s.settled_at, s.compensates, s.held_by,
           s.duplicates_acknowledged_at,
           case when lost.effect_id is null then s.error_class else 'worker_lost' end,
           s.retry_not_before, s.during, s.double_candidate, s.creation_version_stored,
           s.latest_version_in_row
      from (
            select e.id, e.op_key, e.action, e.target, e.params, e.params_hash, e.amount_minor, e.currency,
                   e.provider, e.requested_by, e.owner_role, e.approval_ref, e.approval_version,
                   e.request_id, v.state, v.state_since, e.pending_window, v.deadline_at, v.external_ref,
                   e.result, v.failure_reason, v.retryable, v.late_result_at, v.attention, v.version,
                   e.created_at, v.dispatched_at, e.dispatched_by, e.dispatched_role, v.at as updated_at,
                   v.settled_at, e.compensates, v.held_by, v.duplicates_acknowledged_at, v.error_class,
                   v.retry_not_before, e.during, e.double_candidate, e.creation_version_stored,
                   e.latest_version_in_row
              from ledger.effects e
             cross join lateral (
                    select v.* from ledger.effect_history v
                     where v.effect_id = e.id and v.at <= at_time
                     order by v.version desc limit 1) v
             where at_time is not null and e.updated_at > at_time and e.created_at <= at_time
           ) s
      left join ledger.worker_leases lost
        on lost.effect_id = s.id and s.state = 'pending' and s.dispatched_at is not null
       and lost.lease_until < at_time
$$;

-- Writes the loss of one locked effect's worker, if its lease has run out:
-- the effect turns unknown (worker_lost), kept in its history and audited
-- as the ledger's own finding. Returns the effect as it then is.
create function ledger.write_worker_lost(effect ledger.effects) returns ledger.effects
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    lease  ledger.worker_leases;
    after  ledger.effects;
    reason text;
begin
    if effect.state <> 'pending' or effect.dispatched_at is null then
        return effect;
    end if;
    select w.* into lease from ledger.worker_leases w
     where w.effect_id = effect.id and w.lease_until < now();
    if not found then
        return effect;
    end if;
    reason := ledger.worker_lost_reason(lease);
    perform set_config('ledger.actor', 'ledger', true);
    perform set_config('ledger.reason', reason, true);
    update ledger.effects e
       set state = 'unknown', error_class = 'worker_lost', failure_reason = reason
     where e.id = effect.id
    returning e.* into after;
    perform ledger.audit('ledger', 'worker_lost', after, reason,
                         ledger.effect_snapshot(effect), ledger.effect_snapshot(after));
    return after;
end
$$;

-- A beat: the worker running `op_key`'s provider call is alive; its lease
-- runs `lease` from now. Answers whether the call is still the worker's to
-- finish: false when the effect is no longer pending and dispatched (it was
-- completed, or declared lost when an earlier lease ran out — a lease that
-- ran out is never renewed, so that what every view said stays true).
-- The first beat makes the lease. Only the effect's owner may beat for it.
create function ledger.heartbeat(
    op_key text, lease interval default interval '15 seconds', worker text default null
) returns table (alive boolean, state text, lease_until timestamptz)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect  ledger.effects;
    refusal text;
    until   timestamptz;
begin
    perform ledger.forget_caller_settings();
    perform ledger.check_lease(heartbeat.lease);
    -- No row lock: a beat must not queue behind the effect's completion.
    select e.* into effect from ledger.effects e where e.op_key = heartbeat.op_key;
    if not found then
        raise exception 'ledger: no effect with key %', heartbeat.op_key
            using errcode = 'no_data_found', hint = 'call ledger.begin_effect first';
    end if;
    refusal := ledger.writer_refusal(effect, 'beat for');
    if refusal is not null then
        raise exception 'ledger: %', refusal using errcode = 'insufficient_privilege';
    end if;
    if effect.state <> 'pending' or effect.dispatched_at is null then
        return query select false, effect.state, null::timestamptz;
        return;
    end if;
    insert into ledger.worker_leases as w (effect_id, worker, lease, lease_until)
    values (effect.id, heartbeat.worker, heartbeat.lease, now() + heartbeat.lease)
    on conflict (effect_id) do update
       set lease_until = excluded.lease_until, lease = excluded.lease,
           worker = coalesce(excluded.worker, w.worker), beats = w.beats + 1
     where w.lease_until >= now()
    returning w.lease_until into until;
    if until is not null then
        -- A beat that only moved its lease is not worth a wait for the
        -- disk: one lost in a server crash ends the lease sooner, and the
        -- call is then reconciled (its own answer still settles it). A
        -- beat that writes a loss, like every other write, stays durable.
        perform set_config('synchronous_commit', 'off', true);
        return query select true, effect.state, until;
        return;
    end if;
    -- The lease had run out before this beat: the worker was declared lost
    -- in every view, and is now in the ledger too.
    select e.* into effect from ledger.effects e where e.id = effect.id for update;
    effect := ledger.write_worker_lost(effect);
    return query select effect.state = 'pending', effect.state, null::timestamptz;
end
$$;

-- A lease can start with the claim itself, at no extra round trip: the
-- clients and the gateway pass `heartbeat_lease` to mark_dispatched or
-- begin_and_dispatch, and their first beat is due a third of a lease
-- later — a call shorter than that never beats at all. Both functions gain
-- the defaulted parameter last: a caller naming its arguments is unchanged.
create function ledger.check_lease(lease interval) returns void
language plpgsql immutable as $$
begin
    if lease is null or lease < interval '1 second' or lease > interval '1 hour' then
        raise exception 'ledger: a heartbeat lease is from 1 second to 1 hour, not %', coalesce(lease::text, 'null')
            using errcode = 'invalid_parameter_value';
    end if;
end
$$;

-- Starts (or, for an effect dispatched again, starts anew) the lease of a
-- claimed effect; its caller checked the lease before claiming.
create function ledger.start_lease(effect_id bigint, worker text, lease interval) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    insert into ledger.worker_leases as w (effect_id, worker, lease, lease_until)
    values (start_lease.effect_id, start_lease.worker, start_lease.lease, now() + start_lease.lease)
    on conflict on constraint worker_leases_pkey do update
       set worker = excluded.worker, lease = excluded.lease, lease_until = excluded.lease_until,
           beats = 1, first_beat_at = now();
end
$$;

drop function ledger.mark_dispatched(text, text, text, text);
create function ledger.mark_dispatched(
    op_key     text,
    request_id text default null,
    worker     text default null,
    target     text default null,
    heartbeat_lease interval default null
) returns table (claimed boolean, state text, deadline_at timestamptz, refused text)
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
        return query select false, effect.state, effect.deadline_at, refusal;
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
            return query select false, effect.state, effect.deadline_at, lapse;
            return;
        end if;
    end if;
    select c.* into claim from ledger.claim_dispatch(effect, mark_dispatched.request_id, mark_dispatched.worker) c;
    if claim.claimed and mark_dispatched.heartbeat_lease is not null then
        perform ledger.start_lease(effect.id, mark_dispatched.worker, mark_dispatched.heartbeat_lease);
    end if;
    return query select claim.claimed, claim.state, claim.deadline_at, null::text;
end
$$;

drop function ledger.begin_and_dispatch(text, text, text, jsonb, text, interval, bigint, text, text, text,
                                        integer, text, tstzrange, text, boolean, boolean);
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
                                      target => begin_and_dispatch.target,
                                      heartbeat_lease => begin_and_dispatch.heartbeat_lease) c;
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

-- Writes every loss whose lease has run out: the reconciler's pass calls
-- it first, so what it takes up next includes them. Returns their keys.
create function ledger.declare_lost_workers(batch integer default 1000)
returns table (op_key text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
begin
    perform ledger.forget_caller_settings();
    for effect in
        select e.* from ledger.worker_leases w
          join ledger.effects e on e.id = w.effect_id
         where w.lease_until < now() and e.state = 'pending' and e.dispatched_at is not null
         order by w.lease_until
         limit greatest(coalesce(declare_lost_workers.batch, 1000), 1)
           for update of e skip locked
    loop
        effect := ledger.write_worker_lost(effect);
        if effect.state = 'unknown' then
            op_key := effect.op_key;
            return next;
        end if;
    end loop;
end
$$;

-- A lease is done with once its effect is settled: dropped then, unless the
-- lease's end is what settled it (kept, so the views at any instant between
-- the lease's end and the write still say so).
create function ledger.drop_finished_lease() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if new.error_class is distinct from 'worker_lost' then
        delete from ledger.worker_leases w where w.effect_id = new.id;
    end if;
    return null;
end
$$;

create trigger effects_drop_finished_lease
    after update of state on ledger.effects
    for each row when (old.state = 'pending' and new.state <> 'pending')
    execute function ledger.drop_finished_lease();
alter table ledger.effects enable always trigger effects_drop_finished_lease;

-- An operator acting on an effect shown unknown because its worker's lease
-- ran out acts on it as shown: the loss is written first, under the lock.
create or replace function ledger.operator_begin(
    action text, op_key text, expected_version bigint, operator text, reason text,
    refused_argument text default null
) returns ledger.effects
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    effect ledger.effects;
begin
    effect := ledger.lock_for_operator(operator_begin.op_key, operator_begin.expected_version,
                                       operator_begin.operator, operator_begin.reason, true);
    if operator_begin.refused_argument is not null then
        raise exception '%', operator_begin.refused_argument using errcode = 'invalid_parameter_value';
    end if;
    effect := ledger.write_worker_lost(effect);
    perform set_config('ledger.actor', operator_begin.operator, true);
    perform set_config('ledger.reason', coalesce(operator_begin.reason, ''), true);
    perform ledger.require_applicable(effect, operator_begin.action);
    return effect;
end
$$;

revoke all on table ledger.worker_leases from public;
grant select on ledger.worker_leases to effect_operator, effect_readonly;
revoke execute on function
    ledger.check_lease(interval),
    ledger.start_lease(bigint, text, interval),
    ledger.mark_dispatched(text, text, text, text, interval),
    ledger.begin_and_dispatch(text, text, text, jsonb, text, interval, bigint, text, text, text, integer, text,
                              tstzrange, text, boolean, boolean, interval),
    ledger.worker_lost_reason(ledger.worker_leases),
    ledger.write_worker_lost(ledger.effects),
    ledger.heartbeat(text, interval, text),
    ledger.declare_lost_workers(integer),
    ledger.drop_finished_lease()
    from public;
-- Every view reads effects_at as the querying role: consoles say the loss.
grant execute on function ledger.worker_lost_reason(ledger.worker_leases)
    to effect_operator, effect_readonly;
grant execute on function
    ledger.heartbeat(text, interval, text),
    ledger.mark_dispatched(text, text, text, text, interval),
    ledger.begin_and_dispatch(text, text, text, jsonb, text, interval, bigint, text, text, text, integer, text,
                              tstzrange, text, boolean, boolean, interval)
    to effect_agent;
grant execute on function ledger.declare_lost_workers(integer) to effect_operator;
