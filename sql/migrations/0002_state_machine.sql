-- The state machine lives in the database so that no writer — an agent, an
-- operator function, or a superuser typing UPDATE by hand — can move an
-- effect along a path DESIGN.md does not allow.

-- Who is acting, as set by the ledger functions for the current transaction
-- (falls back to the database role for hand-written statements).
create function ledger.current_actor() returns text
language sql stable as $$
    select coalesce(nullif(current_setting('ledger.actor', true), ''), session_user::text)
$$;

create function ledger.transition_allowed(
    from_state text, to_state text, was_dispatched boolean, was_retryable boolean
) returns boolean
language sql immutable as $$
    select case from_state
        when 'pending'   then to_state in ('succeeded', 'failed', 'unknown')
                              or (to_state = 'cancelled' and not was_dispatched)
        when 'held'      then to_state in ('pending', 'cancelled')
        when 'unknown'   then to_state in ('succeeded', 'failed')
        when 'succeeded' then to_state = 'compensated'
        when 'failed'    then to_state = 'pending' and coalesce(was_retryable, false)
        else false
    end
$$;

-- The columns that say what an effect is never change. A trigger of its
-- own, fired only by an UPDATE that names one of them: a column no SET
-- names cannot change, so the writer's updates, which name none, skip it
-- (the guard below runs for every write, and each of its checks costs every
-- writer call). Triggers fire in the order of their names, so this one
-- refuses a change of identity before the guard looks at anything else.
create function ledger.effects_frozen_identity() returns trigger
language plpgsql as $$
begin
    if new.op_key is distinct from old.op_key
       or new.action is distinct from old.action
       or new.target is distinct from old.target
       or new.params_hash is distinct from old.params_hash
       or new.params is distinct from old.params
       or new.created_at is distinct from old.created_at
       or new.creation_version_stored is distinct from old.creation_version_stored then
        raise exception 'ledger: the identity of effect % (key, action, target, params) never changes', old.op_key
            using errcode = 'check_violation',
                  hint = 'a different intent needs a new operation key';
    end if;
    return new;
end
$$;

create trigger effects_frozen_identity
    before update of op_key, action, target, params, params_hash, created_at, creation_version_stored
    on ledger.effects
    for each row execute function ledger.effects_frozen_identity();

create function ledger.effects_guard() returns trigger
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
                                     'business_rejection', 'rate_limited')
            then 'effects_error_class_check: error class is one of timeout, connection_reset, server_error, '
                 'invalid_response, business_rejection, rate_limited'
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

create trigger effects_guard
    before insert or update on ledger.effects
    for each row execute function ledger.effects_guard();

-- True for the writes of an effect going well: created pending, dispatched,
-- answered within its window. None of them adds to or removes from a pane.
-- SQL, so that it is inlined into the guard's expression rather than called
-- (and its state rebuilt) on every write.
create function ledger.changes_no_pane(operation text, old ledger.effects, new ledger.effects)
returns boolean
language sql stable as $$
    select case when operation = 'INSERT' then (new).state = 'pending'
                else (old).state = 'pending'
                     and (new).state in ('pending', 'succeeded', 'failed')
                     and ((old).deadline_at is null or (old).deadline_at >= now())
                     and (new).attention is not distinct from (old).attention
                     and (new).late_result_at is not distinct from (old).late_result_at end
$$;

-- The reason a writer's change carries when its caller gives none: none
-- while pending (a dispatch), else what the worker's answer was. The
-- writer's completion (0005) and the history view of a version kept in the
-- row (latest_version_in_row, 0001) read it here, so the guard keeps in the
-- row only what the view will say again.
create function ledger.default_reason(state text) returns text
language sql immutable as $$
    select case when state <> 'pending' then 'worker reported ' || state end
$$;

-- Who made a version kept in the row: while pending, the worker that
-- dispatched the effect (a dispatch always names one), else its requester;
-- an answer, its requester, as the writer records an answer that names no
-- worker (0005).
create function ledger.default_actor(state text, requested_by text, dispatched_by text) returns text
language sql immutable as $$
    select case when state = 'pending' then coalesce(dispatched_by, requested_by) else requested_by end
$$;

-- One version of an effect into its history, and, if it can change a pane,
-- a word to the consoles. The guard trigger calls it for every update that
-- keeps a version row and the history trigger for a creation that has a
-- row of its own. Returns true, so that the guard can call it as a plain
-- expression.
create function ledger.keep_version(from_state text, new ledger.effects, announce boolean)
returns boolean
language plpgsql as $$
begin
    insert into ledger.effect_versions (
        effect_id, version, from_state, state, actor, db_role, reason, state_since, dispatched_at,
        deadline_at, external_ref, failure_reason, retryable, late_result_at, attention, settled_at,
        held_by, duplicates_acknowledged_at, error_class, retry_not_before)
    values (new.id, new.version, keep_version.from_state, new.state,
            ledger.current_actor(), session_user::text, nullif(current_setting('ledger.reason', true), ''),
            new.state_since, new.dispatched_at, new.deadline_at, new.external_ref, new.failure_reason,
            new.retryable, new.late_result_at, new.attention, new.settled_at, new.held_by,
            new.duplicates_acknowledged_at, new.error_class, new.retry_not_before);
    -- Consoles LISTEN on this channel to refresh before their next poll.
    -- A transaction that notifies commits under a database-wide lock, one at
    -- a time, which cut writer throughput by more than half; the happy path
    -- (a new pending effect, its dispatch, its success or failure within its
    -- window) changes no pane, so only changes that can are announced.
    if announce then
        perform pg_notify('effectwatch_ledger',
                          json_build_object('id', new.id, 'op_key', left(new.op_key, 200),
                                            'state', new.state, 'version', new.version)::text);
    end if;
    return true;
end
$$;

-- After the insert, so that an insert that does nothing (ON CONFLICT) keeps
-- nothing; only for a creation that has a version row of its own.
create function ledger.effects_history() returns trigger
language plpgsql as $$
begin
    perform ledger.keep_version(null, new, not ledger.changes_no_pane('INSERT', null, new));
    return null;
end
$$;

create trigger effects_history
    after insert on ledger.effects
    for each row when (new.creation_version_stored)
    execute function ledger.effects_history();

-- Every version of every effect: the rows of ledger.effect_versions; the
-- version each effect was created with where that is the row's own creation
-- columns (creation_version_stored is false; id 0 sorts it first); and its
-- latest version where that is the row's own columns (latest_version_in_row;
-- id 2^53 - 1, above any row's and exact in a JSON reader, sorts it last;
-- it gets a row's id when the next change stores it). Time travel, state
-- changes, reports and retention's export all read this.
create view ledger.effect_history as
select v.id, v.effect_id, v.version, v.at, v.from_state, v.state, v.actor, v.db_role, v.reason,
       v.state_since, v.dispatched_at, v.deadline_at, v.external_ref, v.failure_reason, v.retryable,
       v.late_result_at, v.attention, v.settled_at, v.held_by, v.duplicates_acknowledged_at,
       v.error_class, v.retry_not_before
  from ledger.effect_versions v
union all
select 0::bigint, e.id, 1::bigint, e.created_at, null::text, 'pending'::text, e.requested_by,
       e.owner_role, null::text, e.created_at, null::timestamptz, e.created_at + e.pending_window,
       null::text, null::text, null::boolean, null::timestamptz, null::text, null::timestamptz,
       null::bigint, null::timestamptz, null::text, null::timestamptz
  from ledger.effects e
 where not e.creation_version_stored
union all
select 9007199254740991::bigint, e.id, e.version, e.updated_at, 'pending'::text, e.state,
       ledger.default_actor(e.state, e.requested_by, e.dispatched_by), e.owner_role,
       ledger.default_reason(e.state), e.state_since,
       e.dispatched_at, e.deadline_at, e.external_ref, e.failure_reason, e.retryable,
       e.late_result_at, e.attention, e.settled_at, e.held_by, e.duplicates_acknowledged_at,
       e.error_class, e.retry_not_before
  from ledger.effects e
 where e.latest_version_in_row;

-- Every state change: the versions that changed the state.
create view ledger.effect_events as
select v.id, v.effect_id, e.op_key, v.from_state, v.state as to_state, v.actor, v.db_role, v.reason, v.at
  from ledger.effect_history v
  join ledger.effects e on e.id = v.effect_id
 where v.from_state is distinct from v.state;

create function ledger.reject_change() returns trigger
language plpgsql as $$
begin
    raise exception 'ledger: % is append-only (% refused)', tg_table_schema || '.' || tg_table_name, tg_op
        using errcode = 'insufficient_privilege';
end
$$;

-- True while the partition functions (sql/0018_history_partitions.sql) move
-- history rows between a month and the kept partition in this transaction:
-- the rows are carried over unchanged, not altered. Set, like
-- ledger.prune_xact below, to the id of the transaction that moves, so a
-- value set by hand in another never matches; only the owner holds INSERT
-- or DELETE on the history tables at all.
create function ledger.moving_history() returns boolean
language sql volatile as $$
    select current_setting('ledger.history_move_xact', true) = pg_current_xact_id()::text
$$;

-- Append-only, with two sanctioned exceptions: retention (see
-- ledger.prune_settled in 0013_retention.sql for why a DELETE through it is
-- safe) and a move between partitions.
create function ledger.append_only_except_prune() returns trigger
language plpgsql as $$
begin
    if tg_op = 'DELETE' and ledger.moving_history() then
        return old;
    end if;
    if tg_op = 'DELETE'
       and current_setting('ledger.prune_xact', true) = pg_current_xact_id()::text
       and exists (select 1 from ledger.effects e
                    where e.id = old.effect_id and e.state in ('succeeded', 'failed', 'cancelled')) then
        return old;
    end if;
    raise exception 'ledger: % is append-only (% refused)', tg_table_schema || '.' || tg_table_name, tg_op
        using errcode = 'insufficient_privilege',
              hint = 'old settled effects are removed with ledger.prune_settled';
end
$$;

create trigger attempts_append_only
    before update or delete on ledger.attempts
    for each row execute function ledger.append_only_except_prune();
create trigger attempts_no_truncate
    before truncate on ledger.attempts
    for each statement execute function ledger.reject_change();
create trigger effect_versions_append_only
    before update or delete on ledger.effect_versions
    for each row execute function ledger.append_only_except_prune();
create trigger effect_versions_no_truncate
    before truncate on ledger.effect_versions
    for each statement execute function ledger.reject_change();

-- ENABLE ALWAYS: a trigger left at the default does not fire in a session
-- with session_replication_role = replica, which any superuser may set for
-- one transaction; these must fire whoever writes, in every session mode.
alter table ledger.effects enable always trigger effects_guard;
alter table ledger.effects enable always trigger effects_frozen_identity;
alter table ledger.effects enable always trigger effects_history;
alter table ledger.attempts enable always trigger attempts_append_only;
alter table ledger.attempts enable always trigger attempts_no_truncate;
alter table ledger.effect_versions enable always trigger effect_versions_append_only;
alter table ledger.effect_versions enable always trigger effect_versions_no_truncate;
