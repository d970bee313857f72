-- Operator actions. Each is one call in one transaction that checks the
-- version the operator saw, applies the change and appends its audit entry.
-- They are SECURITY DEFINER: the operator role holds no write privilege on
-- the tables, so these functions are its only way to change a row.
--
-- Errors an operator's tool must tell apart carry their own SQLSTATE:
--   EW404  no effect with that key
--   EW409  the effect changed since the operator looked (nothing written)
--   EW422  the action does not apply to the effect as it is (nothing written)

create function ledger.effect_snapshot(effect ledger.effects) returns jsonb
language sql immutable as $$
    select jsonb_strip_nulls(jsonb_build_object(
        'state', (effect).state, 'version', (effect).version,
        'external_ref', (effect).external_ref, 'retryable', (effect).retryable,
        'failure_reason', (effect).failure_reason, 'attention', (effect).attention,
        'held_by', (effect).held_by,
        'duplicates_acknowledged_at', (effect).duplicates_acknowledged_at))
$$;

-- Locks the effect and checks the operator saw its current version.
create function ledger.lock_for_operator(
    op_key text, expected_version bigint, operator text, reason text, reason_required boolean
) returns ledger.effects
language plpgsql as $$
declare
    effect ledger.effects;
begin
    if coalesce(btrim(operator), '') = '' then
        raise exception 'ledger: an operator name is required' using errcode = 'invalid_parameter_value';
    end if;
    if reason_required and coalesce(btrim(reason), '') = '' then
        raise exception 'ledger: a reason is required for an action that changes state (key %)', op_key
            using errcode = 'invalid_parameter_value';
    end if;
    -- The same lock order as begin_effect (target, then row): an operator
    -- action that creates an effect on the target (a compensation) and an
    -- agent calling begin_effect for this key can then never deadlock.
    perform pg_advisory_xact_lock(hashtextextended('ledger.target:' || e.target, 0))
       from ledger.effects e where e.op_key = lock_for_operator.op_key;
    select e.* into effect from ledger.effects e where e.op_key = lock_for_operator.op_key for update;
    if not found then
        raise exception 'ledger: no effect with key %', op_key using errcode = 'EW404';
    end if;
    if expected_version is not null and effect.version <> expected_version then
        raise exception 'ledger: effect % changed since you looked (version % now, you saw %)',
            op_key, effect.version, expected_version
            using errcode = 'EW409', hint = 'refresh and decide again';
    end if;
    perform set_config('ledger.actor', operator, true);
    perform set_config('ledger.reason', coalesce(reason, ''), true);
    return effect;
end
$$;

-- Which operator actions apply to effects as they are now: the one
-- definition the operator functions refuse by and the console greys its
-- keys by. For each effect, the actions that do not apply, each with the
-- sentence that says why (an action not listed applies; its function may
-- still refuse on what it is given). Actions not named here (annotate,
-- escalate, reconcile) apply to every effect. Set-wise, by key, because a
-- console asks it of every effect it shows on every poll: one plan for
-- them all.
create function ledger.refusals(op_keys text[]) returns table (op_key text, refused jsonb)
language sql stable as $$
    select e.op_key, jsonb_strip_nulls(jsonb_build_object(
        'resolve',
        case when e.state not in ('pending', 'unknown')
             then 'only a pending or unknown effect is resolved by hand' end,
        'release',
        case when e.state <> 'held' then 'only a held effect is released' end,
        'cancel',
        case when not (e.state = 'held' or (e.state = 'pending' and e.dispatched_at is null))
             then 'only a held effect, or a pending one never dispatched, is cancelled' end,
        'compensate',
        case when e.compensates is not null
             then 'it is itself a compensation: reconcile or resolve it instead'
             -- op_compensate answers a repeated request with the compensation
             -- already made, before it asks this.
             when e.state = 'compensated'
             then 'it is compensated already: its compensation is in its detail'
             when e.state <> 'succeeded'
             then 'only a succeeded effect is compensated' end,
        'acknowledge_duplicates',
        -- By the effect's own attempts, read by their effect's index: left to
        -- itself the planner walks the pane's index of every recent repeat
        -- for each effect (OFFSET 0 keeps the test out of the scan).
        case when not exists (select 1
                                from (select * from ledger.attempts a where a.effect_id = e.id offset 0) a
                               where ledger.shown_as_duplicate(a, e.duplicates_acknowledged_at, null))
             then 'it has no repeated or flagged calls to acknowledge' end))
      from ledger.effects e
     where e.op_key = any(refusals.op_keys)
$$;

-- Why `action` does not apply to the effect; null: it applies.
create function ledger.why_not(effect ledger.effects, action text) returns text
language sql stable as $$
    select r.refused ->> action from ledger.refusals(array[(effect).op_key]) r
$$;

create function ledger.require_applicable(effect ledger.effects, what text) returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    why text := ledger.why_not(effect, what);
begin
    if why is not null then
        raise exception 'ledger: cannot % effect % in state %: %', replace(what, '_', ' '),
            (effect).op_key, (effect).state, why
            using errcode = 'EW422';
    end if;
end
$$;

-- Resolve by hand, with evidence: succeeded needs the provider's reference.
create function ledger.op_resolve(
    op_key text, expected_version bigint, operator text, reason text,
    outcome text, external_ref text default null, retryable boolean default false
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
    before jsonb;
    seq bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_resolve.op_key, op_resolve.expected_version,
                                       op_resolve.operator, op_resolve.reason, true);
    if op_resolve.outcome not in ('succeeded', 'failed') or op_resolve.outcome is null then
        raise exception 'ledger: resolve outcome must be succeeded or failed' using errcode = 'invalid_parameter_value';
    end if;
    if op_resolve.outcome = 'succeeded' and coalesce(btrim(op_resolve.external_ref), '') = '' then
        raise exception 'ledger: resolving % as succeeded needs the provider''s external reference', op_resolve.op_key
            using errcode = 'invalid_parameter_value';
    end if;
    perform ledger.require_applicable(effect, 'resolve');
    before := ledger.effect_snapshot(effect);
    update ledger.effects e
       set state = op_resolve.outcome,
           external_ref = coalesce(op_resolve.external_ref, e.external_ref),
           retryable = case when op_resolve.outcome = 'failed' then coalesce(op_resolve.retryable, false) end,
           failure_reason = case when op_resolve.outcome = 'failed' then op_resolve.reason end,
           attention = null
     where e.id = effect.id
    returning e.* into effect;
    seq := ledger.audit(op_resolve.operator, 'resolve', effect, op_resolve.reason,
                        before, ledger.effect_snapshot(effect));
    return query select effect.state, effect.version, seq;
end
$$;

create function ledger.op_release(
    op_key text, expected_version bigint, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
    before jsonb;
    seq bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_release.op_key, op_release.expected_version,
                                       op_release.operator, op_release.reason, true);
    perform ledger.require_applicable(effect, 'release');
    before := ledger.effect_snapshot(effect);
    begin
        update ledger.effects e
           set state = 'pending', held_by = null, deadline_at = now() + e.pending_window
         where e.id = effect.id
        returning e.* into effect;
    exception when exclusion_violation then
        raise exception 'ledger: % still overlaps a booking that is open or done: cancel it, or settle the other first',
            effect.op_key using errcode = 'EW422';
    end;
    update ledger.holds h set closed_at = now(), closed_how = 'released', closed_by = op_release.operator
     where h.effect_id = effect.id and h.closed_at is null;
    seq := ledger.audit(op_release.operator, 'release', effect, op_release.reason,
                        before, ledger.effect_snapshot(effect));
    return query select effect.state, effect.version, seq;
end
$$;

create function ledger.op_cancel(
    op_key text, expected_version bigint, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
    before jsonb;
    seq bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_cancel.op_key, op_cancel.expected_version,
                                       op_cancel.operator, op_cancel.reason, true);
    perform ledger.require_applicable(effect, 'cancel');
    before := ledger.effect_snapshot(effect);
    update ledger.effects e set state = 'cancelled' where e.id = effect.id
    returning e.* into effect;
    update ledger.holds h set closed_at = now(), closed_how = 'cancelled', closed_by = op_cancel.operator
     where h.effect_id = effect.id and h.closed_at is null;
    seq := ledger.audit(op_cancel.operator, 'cancel', effect, op_cancel.reason,
                        before, ledger.effect_snapshot(effect));
    return query select effect.state, effect.version, seq;
end
$$;

-- Holds end by rule. When a holder settles, what it held is decided again
-- in the same transaction, whoever settled it (its agent, a
-- reconciliation, an operator, a compensation):
--   failed or cancelled: the oldest effect it held is released (pending,
--     and the held call, asked again, proceeds); the others now wait behind
--     the released one;
--   succeeded: they wait for a person (a second action on one object is a
--     real decision), unless the action's policy says on_holder_success =
--     'cancel', which cancels them;
--   unknown: nothing; the holder is still open.
-- A holder may itself be held (a key asked while the only open effect on
-- its target was held waits behind that one): cancelled, it releases too.
-- Each change is audited as the ledger's, with the holder and its state as
-- the reason. A release a booking's overlap forbids is left to a person.
create function ledger.holds_end_by_rule() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    held         ledger.effects;
    before       jsonb;
    why          text;
    saved_actor  text;
    saved_reason text;
begin
    if not exists (select 1 from ledger.effects h where h.held_by = new.id and h.state = 'held') then
        return null;
    end if;
    if new.state = 'succeeded'
       and (ledger.policy_for(new.action)).on_holder_success is distinct from 'cancel' then
        return null;
    end if;
    saved_actor := current_setting('ledger.actor', true);
    saved_reason := current_setting('ledger.reason', true);
    perform set_config('ledger.actor', 'ledger', true);
    if new.state = 'succeeded' then
        why := 'cancelled by rule: ' || new.op_key || ', which held it, succeeded, and the '
               || new.action || ' policy cancels what it held';
        perform set_config('ledger.reason', why, true);
        for held in select h.* from ledger.effects h
                     where h.held_by = new.id and h.state = 'held'
                     order by h.created_at, h.id for update
        loop
            before := ledger.effect_snapshot(held);
            update ledger.effects e set state = 'cancelled' where e.id = held.id returning e.* into held;
            update ledger.holds h set closed_at = now(), closed_how = 'cancelled', closed_by = 'ledger'
             where h.effect_id = held.id and h.closed_at is null;
            perform ledger.audit('ledger', 'cancel_by_rule', held, why, before, ledger.effect_snapshot(held));
        end loop;
    else
        select h.* into held from ledger.effects h
         where h.held_by = new.id and h.state = 'held'
         order by h.created_at, h.id limit 1 for update;
        why := 'released by rule: ' || new.op_key || ', which held it, ' || new.state;
        perform set_config('ledger.reason', why, true);
        before := ledger.effect_snapshot(held);
        begin
            update ledger.effects e
               set state = 'pending', held_by = null, deadline_at = now() + e.pending_window
             where e.id = held.id
            returning e.* into held;
        exception when exclusion_violation then
            -- Still overlaps another booking: a person decides.
            perform set_config('ledger.actor', coalesce(saved_actor, ''), true);
            perform set_config('ledger.reason', coalesce(saved_reason, ''), true);
            return null;
        end;
        update ledger.holds h set closed_at = now(), closed_how = 'released', closed_by = 'ledger'
         where h.effect_id = held.id and h.closed_at is null;
        perform ledger.audit('ledger', 'release_by_rule', held, why, before, ledger.effect_snapshot(held));
        -- The rest wait behind the one released, and are released in turn.
        perform set_config('ledger.reason', 'now held by ' || held.op_key || ': ' || why, true);
        update ledger.effects e set held_by = held.id
         where e.held_by = new.id and e.state = 'held';
        update ledger.holds h set holder_id = held.id
         where h.holder_id = new.id and h.closed_at is null;
    end if;
    perform set_config('ledger.actor', coalesce(saved_actor, ''), true);
    perform set_config('ledger.reason', coalesce(saved_reason, ''), true);
    return null;
end
$$;

create trigger effects_holds_end_by_rule
    after update of state on ledger.effects
    for each row
    when (new.state in ('succeeded', 'failed', 'cancelled') and old.state in ('pending', 'unknown', 'held'))
    execute function ledger.holds_end_by_rule();
alter table ledger.effects enable always trigger effects_holds_end_by_rule;

-- A note on the record; changes no state, so the version check is only a
-- guard against annotating something other than what the operator saw.
create function ledger.op_annotate(
    op_key text, expected_version bigint, operator text, note text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
    seq bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_annotate.op_key, op_annotate.expected_version,
                                       op_annotate.operator, op_annotate.note, true);
    seq := ledger.audit(op_annotate.operator, 'annotate', effect, op_annotate.note,
                        ledger.effect_snapshot(effect), null);
    return query select effect.state, effect.version, seq;
end
$$;

-- An operator has looked at a key's repeated and flagged calls and settled
-- what they mean: they leave the duplicates pane (which keeps flagged ones
-- for good otherwise) and stay in the attempts, the history and reports.
-- Only a key the pane lists can be acknowledged; later calls show again.
create function ledger.op_acknowledge_duplicates(
    op_key text, expected_version bigint, operator text, reason text
) returns table (state text, version bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
    before jsonb;
    seq bigint;
begin
    perform ledger.forget_caller_settings();
    effect := ledger.lock_for_operator(op_acknowledge_duplicates.op_key,
                                       op_acknowledge_duplicates.expected_version,
                                       op_acknowledge_duplicates.operator,
                                       op_acknowledge_duplicates.reason, true);
    perform ledger.require_applicable(effect, 'acknowledge_duplicates');
    before := ledger.effect_snapshot(effect);
    update ledger.effects e set duplicates_acknowledged_at = now()
     where e.id = effect.id
    returning e.* into effect;
    seq := ledger.audit(op_acknowledge_duplicates.operator, 'acknowledge_duplicates', effect,
                        op_acknowledge_duplicates.reason, before, ledger.effect_snapshot(effect));
    return query select effect.state, effect.version, seq;
end
$$;

-- Whether a provider record is already another effect's reference: two
-- refunds of one invoice must not settle on, nor reverse, the same record.
create function ledger.held_by_another_effect(effect ledger.effects, reference text) returns boolean
language sql stable as $$
    select exists (select 1 from ledger.effects o
                    where o.external_ref = reference and o.id <> (effect).id
                      and o.provider is not distinct from (effect).provider)
$$;

-- Stores what the provider said and applies the state change it allows:
-- exists_once -> succeeded with the reference; absent -> failed (retryable
-- when the action's policy permits); duplicate / mismatch -> flagged for a
-- person; indeterminate -> nothing changes.
create function ledger.record_reconciliation(
    op_key text, expected_version bigint, operator text, provider text, finding text,
    external_refs text[] default '{}', evidence jsonb default '{}'::jsonb, duration_ms integer default null
) returns table (state text, version bigint, reconciliation_id bigint, audit_seq bigint,
                 recorded_finding text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
    before jsonb;
    state_before text;
    recon_id bigint;
    seq bigint;
    reason text;
    applied_finding text;
    note text;
    owed text;
    owed_why text;
begin
    perform ledger.forget_caller_settings();
    if record_reconciliation.finding not in ('exists_once', 'absent', 'duplicate', 'mismatch', 'indeterminate')
       or record_reconciliation.finding is null then
        raise exception 'ledger: unknown reconciliation finding %', record_reconciliation.finding
            using errcode = 'invalid_parameter_value';
    end if;
    reason := 'reconciliation with ' || coalesce(record_reconciliation.provider, 'the provider')
              || ': ' || record_reconciliation.finding;
    effect := ledger.lock_for_operator(record_reconciliation.op_key, record_reconciliation.expected_version,
                                       record_reconciliation.operator, reason, false);
    before := ledger.effect_snapshot(effect);
    state_before := effect.state;
    applied_finding := record_reconciliation.finding;
    -- A reference another effect already holds is not this effect's.
    if applied_finding = 'exists_once'
       and ledger.held_by_another_effect(effect, record_reconciliation.external_refs[1]) then
        applied_finding := 'mismatch';
        note := 'the provider''s record is already the reference of another effect';
    end if;
    -- A call still inside its window may not have reached the provider's
    -- records yet: absent then proves nothing, and failing it would invite a
    -- second dispatch.
    if applied_finding = 'absent' and effect.state = 'pending'
       and effect.dispatched_at is not null and effect.deadline_at > now() then
        applied_finding := 'indeterminate';
        note := 'absent while the call is still inside its window: not applied';
    end if;

    if effect.state in ('pending', 'unknown') then
        if applied_finding = 'exists_once' then
            update ledger.effects e
               set state = 'succeeded', external_ref = coalesce(record_reconciliation.external_refs[1], e.external_ref),
                   attention = null
             where e.id = effect.id returning e.* into effect;
        elsif applied_finding = 'absent' then
            update ledger.effects e
               set state = 'failed',
                   retryable = (select p.retry_when_absent and p.retry_semantics not in ('never_retry', 'escalate')
                                  from ledger.policy_for(e.action) p),
                   failure_reason = 'the provider has no such effect', attention = null
             where e.id = effect.id returning e.* into effect;
            if effect.compensates is not null then
                -- The reversal an operator (or a rule) decided never reached
                -- the provider: the decision stands, and the same key is
                -- sent again, or a person decides.
                owed := case when effect.retryable then 'send_compensation' else 'escalate' end;
                owed_why := case when effect.retryable
                                 then 'the provider never received this compensation: send it again under its key'
                                 else 'the provider never received this compensation, and it may not be sent '
                                      || 'again by rule: decide whether to' end;
            elsif (select p.retry_semantics = 'never_retry' from ledger.policy_for(effect.action) p) then
                owed := 'escalate';
                owed_why := 'the provider has no such effect and the action is never retried automatically: '
                            || 'decide whether to send it again';
            end if;
        elsif applied_finding = 'duplicate'
              and coalesce(array_length(record_reconciliation.external_refs, 1), 0) >= 2
              and effect.compensates is null
              and (select p.retry_semantics = 'compensate' from ledger.policy_for(effect.action) p)
              and not ledger.held_by_another_effect(effect, record_reconciliation.external_refs[1]) then
            -- The action's policy reverses what happened twice: the effect
            -- happened (its first record), and op_reverse_duplicate
            -- reverses each other record.
            update ledger.effects e
               set state = 'succeeded', external_ref = record_reconciliation.external_refs[1],
                   attention = 'duplicate'
             where e.id = effect.id returning e.* into effect;
            owed := 'reverse_duplicates';
            owed_why := 'the provider holds this effect '
                        || array_length(record_reconciliation.external_refs, 1)
                        || ' times and the action''s policy compensates: reverse each extra record';
        elsif applied_finding in ('duplicate', 'mismatch') then
            update ledger.effects e set attention = applied_finding
             where e.id = effect.id returning e.* into effect;
        end if;
    elsif applied_finding in ('duplicate', 'mismatch') then
        -- A settled effect found twice at the provider still needs a person.
        update ledger.effects e set attention = applied_finding
         where e.id = effect.id returning e.* into effect;
    end if;
    if owed is null and applied_finding in ('duplicate', 'mismatch') then
        owed := 'escalate';
        owed_why := 'the provider reports a ' || applied_finding || ' for this key: a person must decide';
    end if;
    -- What the finding leaves owed is recorded with it: whoever recorded
    -- the finding (a reconciler killed a moment later, an operator who
    -- walks away), any reconciler takes the next step.
    if owed is not null then
        perform ledger.record_next_step(effect.id, owed, owed_why, record_reconciliation.operator);
    end if;

    insert into ledger.reconciliations (effect_id, op_key, provider, finding, external_refs, evidence,
                                        duration_ms, state_before, state_after, requested_by)
    values (effect.id, effect.op_key, record_reconciliation.provider, applied_finding,
            coalesce(record_reconciliation.external_refs, '{}'),
            coalesce(record_reconciliation.evidence, '{}')
                || case when note is null then '{}'::jsonb
                        else jsonb_build_object('provider_finding', record_reconciliation.finding, 'note', note) end,
            record_reconciliation.duration_ms, state_before, effect.state, record_reconciliation.operator)
    returning id into recon_id;
    seq := ledger.audit(record_reconciliation.operator, 'reconcile', effect, reason,
                        before, ledger.effect_snapshot(effect)
                            || jsonb_strip_nulls(jsonb_build_object('finding', applied_finding,
                                                  'reconciliation_id', recon_id, 'next_step', owed)));
    -- The finding as recorded, which the ledger may have narrowed (see above).
    return query select effect.state, effect.version, recon_id, seq, applied_finding;
end
$$;
