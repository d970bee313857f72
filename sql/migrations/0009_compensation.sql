-- Settling effects: compensations (idempotent, four-eyes above a limit) and
-- escalations (one per key, delivered with backoff). Every operator step is
-- one call in one transaction with its audit entry, callable by
-- effect_operator only. Errors use the SQLSTATEs of 0008 (EW404, EW409, EW422).
--
-- Compensation, step by step (the console does exactly what a psql user can):
--   1. ledger.op_compensate(op_key, expected_version, operator, reason)
--        Under a row lock on the original: returns the live compensation if
--        there is one (status 'existing') or the request waiting for approval
--        ('awaiting_approval'); else, when the amount is above the action's
--        compensation_approval_limit_minor, records a request for a second
--        operator ('awaiting_approval'); else creates the compensation
--        effect ('created'), key compensate:<op_key>:<n>.
--   2. ledger.op_approve_compensation / ledger.op_reject_compensation
--        Another operator (never the requester: checked here) decides. The
--        compensation effect is created only on approval; until then no
--        effect exists, so no worker, no release of a hold, nothing can
--        dispatch it.
--   3. ledger.op_dispatch_compensation(compensation_key, operator)
--        Claims it as ledger.mark_dispatched would: exactly one caller gets
--        claimed = true and may call the provider, with the compensation key
--        as its Idempotency-Key.
--   4. ledger.op_complete_compensation(compensation_key, operator, outcome, ...)
--        Records the provider's answer. Whichever path makes a compensation
--        succeeded (this, a reconciliation, a resolve by hand), the trigger
--        below makes the original compensated, with an audit entry of its own.
--
-- Why a retried, repeated or concurrent compensation never reverses twice:
-- step 1 serializes callers on the original's row lock, and the second one
-- finds the first one's compensation; at most one compensation of an effect
-- is live at a time; step 3 lets one caller dispatch; the provider sees the
-- same key on every retry. A crash after step 3 leaves the compensation
-- pending and dispatched: a rerun gets it back, is refused the claim, and
-- reconciling it by its key settles it.

-- A compensation is itself an effect. Compensations of different effects on
-- one target must not hold each other: their uniqueness is per original,
-- enforced here, not per target.
insert into ledger.action_policies (action, exclusive_per_target)
values ('compensate', false)
on conflict (action) do nothing;

-- Keys stay within the 512 characters an op_key may have.
create function ledger.compensation_key(op_key text, n integer) returns text
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select case when length(op_key) <= 480 then 'compensate:' || op_key || ':' || n
                else 'compensate:sha256:' || encode(sha256(convert_to(op_key, 'UTF8')), 'hex') || ':' || n
           end
$$;

-- Whether a compensation reverses the effect it is linked to, rather than
-- an extra provider record of it (ledger.op_reverse_duplicate): only the
-- former is the effect's compensation.
create function ledger.reverses_the_effect(compensation_params jsonb) returns boolean
language sql immutable parallel safe
as $$
    select not coalesce(compensation_params ? 'reverses_duplicate', false)
$$;

-- Whether a compensation is still in play: open, succeeded, or never
-- received by the provider and owed to be sent again under its key (a next
-- step). Failed and cancelled ones are history, and a new one may follow.
create function ledger.compensation_in_play(compensation ledger.effects) returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select (compensation).state in ('pending', 'held', 'unknown', 'succeeded')
        or ((compensation).state = 'failed' and coalesce((compensation).retryable, false)
            and exists (select 1 from ledger.next_steps s
                         where s.effect_id = (compensation).id and s.step = 'send_compensation'
                           and s.done_at is null))
$$;

-- The compensation of an effect that is still in play.
create function ledger.live_compensation(original_id bigint) returns ledger.effects
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select c.* from ledger.effects c
     where c.compensates = original_id
       and ledger.compensation_in_play(c)
       and ledger.reverses_the_effect(c.params)
     order by c.id desc
     limit 1
$$;

-- Creates the compensation effect through the writer API, so it is an
-- effect like any other (attempts, events, panes), then links it. The
-- caller holds the original's row lock.
create function ledger.create_compensation(
    original ledger.effects, requested_by text, operator text, approval_ref text,
    reverses_duplicate text default null
) returns ledger.effects
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    n       integer;
    key     text;
    begun   record;
    created ledger.effects;
begin
    -- The writer API refuses these keys to agents, but a key taken anyway
    -- (by hand, by a superuser) is skipped: nothing may block a compensation.
    select 1 + count(*) into n from ledger.effects c
     where c.compensates = (original).id and c.state in ('failed', 'cancelled');
    loop
        key := ledger.compensation_key((original).op_key, n);
        exit when not exists (select 1 from ledger.effects e where e.op_key = key);
        n := n + 1;
    end loop;
    select b.decision, b.effect_id into begun
      from ledger.open_effect(
            op_key => key, action => 'compensate', target => (original).target,
            params => jsonb_strip_nulls(jsonb_build_object(
                'compensates', (original).op_key, 'action', (original).action,
                'external_ref', coalesce(create_compensation.reverses_duplicate, (original).external_ref),
                'reverses_duplicate', create_compensation.reverses_duplicate,
                'amount_minor', (original).amount_minor, 'currency', (original).currency)),
            requested_by => create_compensation.requested_by,
            amount_minor => (original).amount_minor, currency => (original).currency,
            provider => (original).provider,
            approval_ref => create_compensation.approval_ref) b;
    if begun.decision not in ('proceed', 'held') then
        raise exception 'ledger: key % is already used by another effect (%): cannot compensate %',
            key, begun.decision, (original).op_key
            using errcode = 'EW422', hint = 'inspect that key with effectwatch show';
    end if;
    -- begin_effect acted as the requester; the rest of the call is the operator's.
    perform set_config('ledger.actor', create_compensation.operator, true);
    update ledger.effects e set compensates = (original).id
     where e.id = begun.effect_id
    returning e.* into created;
    -- Sending it is the next step, owed from this transaction on: a caller
    -- that dies before it claims the dispatch leaves it to any reconciler.
    if begun.decision = 'proceed' then
        perform ledger.record_next_step(created.id, 'send_compensation',
                                        'compensation of ' || (original).op_key || ' created: send it to '
                                        || coalesce((original).provider, 'the provider'),
                                        create_compensation.operator);
    end if;
    return created;
end
$$;

-- The approval limit of the effect's action, and whether compensating the
-- effect now waits for a second operator (its amount is above the limit):
-- op_compensate decides by it, and the console says it before the operator
-- confirms.
create function ledger.compensation_approval(effect ledger.effects, out limit_minor bigint, out waits boolean)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select p.compensation_approval_limit_minor,
           coalesce(coalesce(abs((effect).amount_minor), 0) > p.compensation_approval_limit_minor, false)
      from ledger.policy_for((effect).action) p
$$;

create function ledger.op_compensate(
    op_key text, expected_version bigint, operator text, reason text
) returns table (status text, compensation_key text, compensation_state text, dispatched boolean,
                 requested_by text, amount_minor bigint, currency text,
                 approval_limit_minor bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect      ledger.effects;
    existing    ledger.effects;
    request     ledger.compensation_requests;
    created     ledger.effects;
    limit_minor bigint;
    waits       boolean;
    seq         bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_compensate.op_key, op_compensate.expected_version,
                                       op_compensate.operator, op_compensate.reason, true);
    -- Callers of one effect queue on that lock; whoever comes second finds
    -- the first one's compensation or request and gets it back.
    existing := ledger.live_compensation(effect.id);
    if existing.id is not null then
        return query select 'existing'::text, existing.op_key, existing.state,
                            existing.dispatched_at is not null, existing.requested_by,
                            existing.amount_minor, existing.currency, null::bigint, null::bigint;
        return;
    end if;
    select r.* into request from ledger.compensation_requests r
     where r.effect_id = effect.id and r.state = 'awaiting_approval';
    if found then
        return query select 'awaiting_approval'::text, null::text, null::text, false, request.requested_by,
                            request.amount_minor, request.currency, request.approval_limit_minor,
                            null::bigint;
        return;
    end if;
    perform ledger.require_applicable(effect, 'compensate');

    select a.limit_minor, a.waits into limit_minor, waits
      from ledger.compensation_approval(effect) a;
    if waits then
        insert into ledger.compensation_requests (effect_id, op_key, state, amount_minor, currency,
                                                  approval_limit_minor, requested_by, reason)
        values (effect.id, effect.op_key, 'awaiting_approval', effect.amount_minor, effect.currency,
                limit_minor, op_compensate.operator, op_compensate.reason)
        returning * into request;
        seq := ledger.audit(op_compensate.operator, 'compensate_request', effect, op_compensate.reason,
                            ledger.effect_snapshot(effect),
                            ledger.effect_snapshot(effect) || jsonb_build_object(
                                'compensation', 'awaiting_approval', 'request_id', request.id,
                                'approval_limit_minor', limit_minor));
        return query select 'awaiting_approval'::text, null::text, null::text, false, op_compensate.operator,
                            effect.amount_minor, effect.currency, limit_minor, seq;
        return;
    end if;

    created := ledger.create_compensation(effect, op_compensate.operator, op_compensate.operator, null);
    insert into ledger.compensation_requests (effect_id, op_key, state, amount_minor, currency,
                                              requested_by, reason, compensation_id, compensation_key)
    values (effect.id, effect.op_key, 'created', effect.amount_minor, effect.currency,
            op_compensate.operator, op_compensate.reason, created.id, created.op_key);
    seq := ledger.audit(op_compensate.operator, 'compensate', effect, op_compensate.reason,
                        ledger.effect_snapshot(effect),
                        ledger.effect_snapshot(effect) || jsonb_build_object(
                            'compensation_key', created.op_key, 'compensation_state', created.state));
    return query select 'created'::text, created.op_key, created.state, false, op_compensate.operator,
                        created.amount_minor, created.currency, null::bigint, seq;
end
$$;

-- A duplicate at the provider: the action happened more than once under
-- one key. The reconciliation that found it recorded the first record as the
-- effect (its reference); each other record it found is reversed by a
-- compensation of its own, sent under its own key with that record as the
-- reference to reverse, which leaves the effect itself standing. Above the
-- action's approval limit it is a request a second operator approves
-- (ledger.op_approve_compensation), as a compensation is. Repeated calls for
-- one record get its reversal, or the request, back.
create function ledger.op_reverse_duplicate(
    op_key text, expected_version bigint, operator text, reason text, duplicate_ref text
) returns table (status text, compensation_key text, compensation_state text, dispatched boolean,
                 amount_minor bigint, currency text, approval_limit_minor bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect   ledger.effects;
    existing ledger.effects;
    created  ledger.effects;
    request  ledger.compensation_requests;
    approval record;
    seq      bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_reverse_duplicate.op_key, op_reverse_duplicate.expected_version,
                                       op_reverse_duplicate.operator, op_reverse_duplicate.reason, true);
    select c.* into existing from ledger.effects c
     where c.compensates = effect.id
       and c.params ->> 'reverses_duplicate' = op_reverse_duplicate.duplicate_ref
       and ledger.compensation_in_play(c)
     order by c.id desc limit 1;
    if existing.id is not null then
        return query select 'existing'::text, existing.op_key, existing.state,
                            existing.dispatched_at is not null, existing.amount_minor,
                            existing.currency, null::bigint, null::bigint;
        return;
    end if;
    select r.* into request from ledger.compensation_requests r
     where r.effect_id = effect.id and r.state = 'awaiting_approval';
    if found then
        if request.duplicate_ref is distinct from op_reverse_duplicate.duplicate_ref then
            raise exception 'ledger: a request about % already waits for approval: decide it first', effect.op_key
                using errcode = 'EW422';
        end if;
        return query select 'awaiting_approval'::text, null::text, null::text, false, request.amount_minor,
                            request.currency, request.approval_limit_minor, null::bigint;
        return;
    end if;
    if op_reverse_duplicate.duplicate_ref is not distinct from effect.external_ref then
        raise exception 'ledger: % is the reference of % itself, not a duplicate of it: compensate the effect instead',
            op_reverse_duplicate.duplicate_ref, effect.op_key
            using errcode = 'EW422';
    end if;
    if effect.state <> 'succeeded' or effect.attention is distinct from 'duplicate'
       or effect.compensates is not null then
        raise exception 'ledger: cannot reverse a duplicate of % (%): only a succeeded effect its provider holds twice has one',
            effect.op_key, effect.state
            using errcode = 'EW422';
    end if;
    -- Another effect's record is that effect's, whatever a reconciliation listed.
    if ledger.held_by_another_effect(effect, op_reverse_duplicate.duplicate_ref) then
        raise exception 'ledger: % is the reference of another effect, not a duplicate of %',
            op_reverse_duplicate.duplicate_ref, effect.op_key
            using errcode = 'EW422';
    end if;
    if not exists (select 1 from ledger.reconciliations r
                    where r.effect_id = effect.id and r.finding = 'duplicate'
                      and op_reverse_duplicate.duplicate_ref = any (r.external_refs)) then
        raise exception 'ledger: no reconciliation of % found % among its duplicates',
            effect.op_key, op_reverse_duplicate.duplicate_ref
            using errcode = 'EW422', hint = 'reconcile the effect first';
    end if;
    select a.limit_minor, a.waits into approval from ledger.compensation_approval(effect) a;
    if approval.waits then
        insert into ledger.compensation_requests (effect_id, op_key, state, amount_minor, currency,
                                                  approval_limit_minor, requested_by, reason, duplicate_ref)
        values (effect.id, effect.op_key, 'awaiting_approval', effect.amount_minor, effect.currency,
                approval.limit_minor, op_reverse_duplicate.operator, op_reverse_duplicate.reason,
                op_reverse_duplicate.duplicate_ref)
        returning * into request;
        seq := ledger.audit(op_reverse_duplicate.operator, 'reverse_duplicate_request', effect,
                            op_reverse_duplicate.reason, ledger.effect_snapshot(effect),
                            ledger.effect_snapshot(effect) || jsonb_build_object(
                                'duplicate_ref', op_reverse_duplicate.duplicate_ref,
                                'compensation', 'awaiting_approval', 'request_id', request.id,
                                'approval_limit_minor', approval.limit_minor));
        return query select 'awaiting_approval'::text, null::text, null::text, false, effect.amount_minor,
                            effect.currency, approval.limit_minor, seq;
        return;
    end if;
    created := ledger.create_compensation(effect, op_reverse_duplicate.operator, op_reverse_duplicate.operator,
                                          null, op_reverse_duplicate.duplicate_ref);
    insert into ledger.compensation_requests (effect_id, op_key, state, amount_minor, currency,
                                              requested_by, reason, compensation_id, compensation_key,
                                              duplicate_ref)
    values (effect.id, effect.op_key, 'created', effect.amount_minor, effect.currency,
            op_reverse_duplicate.operator, op_reverse_duplicate.reason, created.id, created.op_key,
            op_reverse_duplicate.duplicate_ref);
    seq := ledger.audit(op_reverse_duplicate.operator, 'reverse_duplicate', effect, op_reverse_duplicate.reason,
                        ledger.effect_snapshot(effect),
                        ledger.effect_snapshot(effect) || jsonb_build_object(
                            'duplicate_ref', op_reverse_duplicate.duplicate_ref,
                            'compensation_key', created.op_key, 'compensation_state', created.state));
    return query select 'created'::text, created.op_key, created.state, false, created.amount_minor,
                        created.currency, null::bigint, seq;
end
$$;

-- Four-eyes: a second operator approves, and only then the compensation
-- effect exists. The names compared are the operator names the consoles
-- assert; give each person a database role of their own to make them proof.
create function ledger.op_approve_compensation(
    op_key text, expected_version bigint, operator text, reason text
) returns table (status text, compensation_key text, compensation_state text, requested_by text,
                 duplicate_ref text, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect  ledger.effects;
    request ledger.compensation_requests;
    created ledger.effects;
    seq     bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_approve_compensation.op_key, op_approve_compensation.expected_version,
                                       op_approve_compensation.operator, op_approve_compensation.reason, true);
    select r.* into request from ledger.compensation_requests r
     where r.effect_id = effect.id and r.state = 'awaiting_approval'
       for update;
    if not found then
        raise exception 'ledger: no compensation of % is waiting for approval', effect.op_key
            using errcode = 'EW422';
    end if;
    -- Names are what the client asserts; a per-person login role is proof.
    -- A superuser (the demo, a break-glass session) can do anything anyway,
    -- so only the name is compared for one.
    if lower(btrim(request.requested_by)) = lower(btrim(op_approve_compensation.operator))
       or (request.requested_role = session_user::text
           and not (select r.rolsuper from pg_roles r where r.rolname = session_user)) then
        raise exception 'ledger: % (role %) requested this compensation of % and cannot also approve it',
            request.requested_by, request.requested_role, effect.op_key
            using errcode = 'EW422', hint = 'a second, different operator must approve';
    end if;
    if effect.state <> 'succeeded' then
        raise exception 'ledger: cannot approve the compensation of % in state %: reject the request',
            effect.op_key, effect.state
            using errcode = 'EW422';
    end if;
    created := ledger.create_compensation(effect, request.requested_by, op_approve_compensation.operator,
                                          'compensation_request:' || request.id, request.duplicate_ref);
    update ledger.compensation_requests r
       set state = 'created', decided_by = op_approve_compensation.operator, decided_role = session_user,
           decided_at = now(), decision_reason = op_approve_compensation.reason,
           compensation_id = created.id, compensation_key = created.op_key
     where r.id = request.id;
    seq := ledger.audit(op_approve_compensation.operator, 'approve', effect, op_approve_compensation.reason,
                        ledger.effect_snapshot(effect),
                        ledger.effect_snapshot(effect) || jsonb_build_object(
                            'request_id', request.id, 'requested_by', request.requested_by,
                            'duplicate_ref', request.duplicate_ref,
                            'compensation_key', created.op_key, 'compensation_state', created.state));
    return query select 'created'::text, created.op_key, created.state, request.requested_by,
                        request.duplicate_ref, seq;
end
$$;

-- Turns a request down; the requester may withdraw their own.
create function ledger.op_reject_compensation(
    op_key text, expected_version bigint, operator text, reason text
) returns table (status text, requested_by text, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect  ledger.effects;
    request ledger.compensation_requests;
    seq     bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_reject_compensation.op_key, op_reject_compensation.expected_version,
                                       op_reject_compensation.operator, op_reject_compensation.reason, true);
    select r.* into request from ledger.compensation_requests r
     where r.effect_id = effect.id and r.state = 'awaiting_approval'
       for update;
    if not found then
        raise exception 'ledger: no compensation of % is waiting for approval', effect.op_key
            using errcode = 'EW422';
    end if;
    update ledger.compensation_requests r
       set state = 'rejected', decided_by = op_reject_compensation.operator, decided_role = session_user,
           decided_at = now(), decision_reason = op_reject_compensation.reason
     where r.id = request.id;
    seq := ledger.audit(op_reject_compensation.operator, 'reject', effect, op_reject_compensation.reason,
                        ledger.effect_snapshot(effect),
                        ledger.effect_snapshot(effect) || jsonb_build_object(
                            'request_id', request.id, 'requested_by', request.requested_by,
                            'compensation', 'rejected'));
    return query select 'rejected'::text, request.requested_by, seq;
end
$$;

-- Locks a compensation effect by key, refusing anything else: the operator
-- role may dispatch and complete compensations, never agents' effects.
create function ledger.lock_compensation(compensation_key text, operator text) returns ledger.effects
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    compensation ledger.effects;
begin
    if coalesce(btrim(operator), '') = '' then
        raise exception 'ledger: an operator name is required' using errcode = 'invalid_parameter_value';
    end if;
    select e.* into compensation from ledger.effects e
     where e.op_key = lock_compensation.compensation_key
       for update;
    if not found then
        raise exception 'ledger: no effect with key %', compensation_key using errcode = 'EW404';
    end if;
    if compensation.compensates is null then
        raise exception 'ledger: % is not a compensation', compensation_key using errcode = 'EW422';
    end if;
    return compensation;
end
$$;

-- Step 3: only a caller that gets claimed = true may call the provider.
create function ledger.op_dispatch_compensation(compensation_key text, operator text)
returns table (claimed boolean, state text, dispatched_at timestamptz, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    compensation ledger.effects;
    before   jsonb;
    dispatch record;
    seq      bigint;
begin
    perform ledger.forget_caller_settings();
    compensation := ledger.lock_compensation(op_dispatch_compensation.compensation_key,
                                             op_dispatch_compensation.operator);
    before := ledger.effect_snapshot(compensation);
    -- Never received by the provider (a reconciliation found it absent):
    -- the decision to reverse stands, so the same key is sent again, as an
    -- agent's safe retry would be. The key is the provider's guard against
    -- a first request that lands late.
    if ledger.compensation_in_play(compensation) and compensation.state = 'failed' then
        perform set_config('ledger.reason', 'never received by the provider: sent again under its key', true);
        update ledger.effects e
           set state = 'pending', dispatched_at = null, dispatched_by = null,
               failure_reason = null, retryable = null, error_class = null, retry_not_before = null,
               deadline_at = now() + e.pending_window
         where e.id = compensation.id
        returning e.* into compensation;
    end if;
    select d.claimed into dispatch
      from ledger.claim_dispatch(compensation, null, op_dispatch_compensation.operator) d;
    select e.* into compensation from ledger.effects e where e.id = compensation.id;
    -- Claimed here, or already dispatched or settled: either way it is no
    -- longer waiting to be sent.
    perform ledger.close_next_step(compensation.id, 'send_compensation', op_dispatch_compensation.operator,
                                   case when dispatch.claimed then 'dispatched'
                                        else 'not sent: ' || compensation.state end);
    if not dispatch.claimed then
        return query select false, compensation.state, compensation.dispatched_at, null::bigint;
        return;
    end if;
    perform set_config('ledger.actor', op_dispatch_compensation.operator, true);
    seq := ledger.audit(op_dispatch_compensation.operator, 'dispatch_compensation', compensation,
                        'sent to ' || coalesce(compensation.provider, 'the provider'),
                        before, ledger.effect_snapshot(compensation));
    return query select true, compensation.state, compensation.dispatched_at, seq;
end
$$;

-- Step 4: what the provider answered to the dispatch. A second answer, or
-- one after the compensation was settled another way, is kept as a repeat
-- or a flagged late result by ledger.complete_effect.
create function ledger.op_complete_compensation(
    compensation_key text, operator text, outcome text,
    external_ref text default null, result jsonb default null,
    retryable boolean default null, reason text default null
) returns table (applied boolean, state text, late boolean, original_state text, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    compensation ledger.effects;
    original     ledger.effects;
    before       jsonb;
    completed    record;
    why          text;
    seq          bigint;
begin
    perform ledger.forget_caller_settings();
    compensation := ledger.lock_compensation(op_complete_compensation.compensation_key,
                                             op_complete_compensation.operator);
    before := ledger.effect_snapshot(compensation);
    why := coalesce(nullif(btrim(op_complete_compensation.reason), ''),
                    'provider answered ' || coalesce(op_complete_compensation.outcome, '?'));
    select c.applied, c.late into completed
      from ledger.record_completion(compensation, op_complete_compensation.outcome,
                                    op_complete_compensation.external_ref, op_complete_compensation.result,
                                    op_complete_compensation.retryable, why, null,
                                    op_complete_compensation.operator) c;
    select e.* into compensation from ledger.effects e where e.id = compensation.id;
    select e.* into original from ledger.effects e where e.id = compensation.compensates;
    perform set_config('ledger.actor', op_complete_compensation.operator, true);
    seq := ledger.audit(op_complete_compensation.operator, 'compensation_result', compensation, why,
                        before, ledger.effect_snapshot(compensation) || jsonb_build_object(
                            'applied', completed.applied, 'late', completed.late,
                            'original_key', original.op_key, 'original_state', original.state));
    return query select completed.applied, compensation.state, completed.late, original.state, seq;
end
$$;

-- However a compensation becomes succeeded, the original becomes
-- compensated in the same transaction, with an audit entry of its own.
create function ledger.compensation_settles_original() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    original     ledger.effects;
    before       jsonb;
    saved_reason text;
    why          text;
begin
    -- Only a compensation's success settles its original (the trigger's
    -- WHEN leaves out every effect that is not a compensation).
    if new.state <> 'succeeded' or old.state is not distinct from 'succeeded' then
        return null;
    end if;
    -- The reversal of a duplicate record leaves the effect itself standing;
    -- once every extra record a reconciliation listed is reversed, the
    -- effect is no longer held twice, and its flag goes (audited).
    if not ledger.reverses_the_effect(new.params) then
        select e.* into original from ledger.effects e where e.id = new.compensates for update;
        if original.attention = 'duplicate' and not exists (
               select 1 from ledger.reconciliations r cross join lateral unnest(r.external_refs) listed(ref)
                where r.effect_id = original.id and r.finding = 'duplicate'
                  and listed.ref is distinct from original.external_ref
                  and not exists (select 1 from ledger.effects c
                                   where c.compensates = original.id and c.state = 'succeeded'
                                     and c.params ->> 'reverses_duplicate' = listed.ref)) then
            why := 'every duplicate record at the provider is reversed (last by ' || new.op_key || ')';
            saved_reason := current_setting('ledger.reason', true);
            perform set_config('ledger.reason', why, true);
            before := ledger.effect_snapshot(original);
            update ledger.effects e set attention = null where e.id = original.id
            returning e.* into original;
            perform ledger.close_next_step(original.id, 'reverse_duplicates', ledger.current_actor(), why);
            perform ledger.audit(ledger.current_actor(), 'duplicates_reversed', original, why, before,
                                 ledger.effect_snapshot(original));
            perform set_config('ledger.reason', coalesce(saved_reason, ''), true);
        end if;
        return null;
    end if;
    select e.* into original from ledger.effects e where e.id = new.compensates for update;
    if not found or original.state <> 'succeeded' then
        -- Already compensated another way, or never succeeded: nothing to reverse in the ledger.
        return null;
    end if;
    why := 'compensated by ' || new.op_key;
    saved_reason := current_setting('ledger.reason', true);
    perform set_config('ledger.reason', why, true);
    before := ledger.effect_snapshot(original);
    update ledger.effects e set state = 'compensated' where e.id = original.id
    returning e.* into original;
    perform ledger.audit(ledger.current_actor(), 'compensated', original, why, before,
                         ledger.effect_snapshot(original) || jsonb_build_object('compensation_key', new.op_key));
    perform set_config('ledger.reason', coalesce(saved_reason, ''), true);
    return null;
end
$$;

-- After the update: the compensation's own state change (recorded by the
-- guard trigger, before it) comes before the original's. The WHEN is as
-- short as it can be: PostgreSQL reads it back from its stored text for
-- every statement that changes a state, every writer's answer included, and
-- the rest of the condition is the function's first line.
create trigger effects_settle_original
    after update of state on ledger.effects
    for each row
    when (new.compensates is not null)
    execute function ledger.compensation_settles_original();
alter table ledger.effects enable always trigger effects_settle_original;
