-- The effect row's guard: only the transitions the state machine allows,
-- and only the error classes the ledger knows — the workers' and its own
-- (worker_lost, written when a heartbeat lease runs out).
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
        -- Claimed as it is created (begin_and_dispatch on a new key): one
        -- write for what begin and claim write in two, and the same two
        -- versions, both the row's own — the creation from its creation
        -- columns, the claim from the row. Only when that is exactly what
        -- the two writes would have made.
        if new.version = 2 then
            if not (new.state = 'pending' and new.created_at = now() and new.dispatched_at = now()
                    and new.deadline_at = now() + new.pending_window
                    and num_nulls(new.external_ref, new.failure_reason, new.retryable, new.late_result_at,
                                  new.attention, new.settled_at, new.held_by, new.duplicates_acknowledged_at,
                                  new.error_class, new.retry_not_before) = 10
                    and ledger.current_actor() = new.requested_by
                    and new.owner_role = session_user::text
                    and new.dispatched_role = session_user::text
                    and nullif(current_setting('ledger.reason', true), '') is null) then
                raise exception 'ledger: effect % is created at version 1, or at 2 only when claimed as it is created by its requester''s login',
                    new.op_key
                    using errcode = 'check_violation';
            end if;
            new.creation_version_stored := false;
            new.latest_version_in_row := true;
            return new;
        end if;
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

revoke all on function ledger.effects_guard() from public;
