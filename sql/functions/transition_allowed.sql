create or replace function ledger.transition_allowed(
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

revoke all on function ledger.transition_allowed(text,text,boolean,boolean) from public;
