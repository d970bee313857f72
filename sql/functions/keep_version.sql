-- One version of an effect into its history, and, if it can change a pane,
-- a word to the consoles. The guard trigger calls it for every update that
-- keeps a version row and the history trigger for a creation that has a
-- row of its own. Returns true, so that the guard can call it as a plain
-- expression.
create or replace function ledger.keep_version(from_state text, new ledger.effects, announce boolean)
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

revoke all on function ledger.keep_version(text,ledger.effects,boolean) from public;
