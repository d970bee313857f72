-- Why a writer call on an existing effect is refused, or null. An effect
-- belongs to the login role that created it: another login (another fleet,
-- or an agent forging a worker name) may not dispatch or complete it. A
-- compensation belongs to the operator path, whoever asks. A superuser
-- session is break-glass and may do anything anyway.
create or replace function ledger.writer_refusal(effect ledger.effects, call text) returns text
language sql stable as $$
    select case
        when (effect).compensates is not null or (effect).op_key ~* '^(compensate|escalate):'
            then format('%s is a compensation: only the operator path (ledger.op_dispatch_compensation, '
                        'ledger.op_complete_compensation) may %s it', (effect).op_key, call)
        -- The owner's own call, every call of the hot path, is answered
        -- before the catalog is read.
        when (effect).owner_role = session_user::text then null
        when not ledger.session_is_superuser()
            then format('effect %s belongs to login role %s; login role %s may not %s it',
                        (effect).op_key, (effect).owner_role, session_user, call)
    end
$$;

revoke all on function ledger.writer_refusal(ledger.effects,text) from public;
