-- Stores what the provider said and applies the state change it allows:
-- exists_once -> succeeded with the reference; absent -> failed (retryable
-- when the action's policy permits); duplicate / mismatch -> flagged for a
-- person; indeterminate -> nothing changes.
create or replace function ledger.record_reconciliation(
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

revoke all on function ledger.record_reconciliation(text,bigint,text,text,text,text[],jsonb,integer) from public;
grant execute on function ledger.record_reconciliation(text,bigint,text,text,text,text[],jsonb,integer) to effect_operator;
