-- What an error class says of the outcome (the articles' rule): a timeout,
-- a reset, a 5xx or an unreadable answer means the effect may or may not
-- have happened: unknown, never failed. A business rejection is final for
-- these params; a rate limit is retryable under the same key after the
-- provider's delay. An outcome that contradicts its class is refused.
create or replace function ledger.outcome_of_class(outcome text, error_class text) returns text
language plpgsql immutable as $$
declare
    implied text;
begin
    if error_class is null then
        return outcome;
    end if;
    implied := case
        when error_class in ('timeout', 'connection_reset', 'server_error', 'invalid_response') then 'unknown'
        when error_class in ('business_rejection', 'rate_limited') then 'failed'
    end;
    if implied is null then
        raise exception 'ledger: unknown error class % (timeout, connection_reset, server_error, invalid_response, business_rejection, rate_limited)',
            error_class using errcode = 'invalid_parameter_value';
    end if;
    if outcome is not null and outcome <> implied then
        raise exception 'ledger: a % means the outcome is %, not %', error_class, implied, outcome
            using errcode = 'invalid_parameter_value',
                  hint = case when implied = 'unknown'
                              then 'the provider may have acted: report unknown and let it be reconciled' end;
    end if;
    return implied;
end
$$;

revoke all on function ledger.outcome_of_class(text,text) from public;
