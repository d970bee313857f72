-- Money is a whole number of minor units: a number of integral value, or
-- a string of one in decimal. Anything else is refused, never rounded.
create or replace function ledger.money_value(value jsonb, argument text) returns bigint
language plpgsql immutable parallel safe as $$
declare
    written text := case jsonb_typeof(value)
        when 'number' then trim_scale(value::numeric)::text
        when 'string' then ledger.white_space_trimmed(value #>> '{}')
    end;
begin
    -- A number's text by value has no point exactly when it is integral.
    if written ~ '^[+-]?[0-9]+$' then
        if abs(written::numeric) <= 9223372036854775807 then
            return written::numeric::bigint;
        end if;
    end if;
    raise exception 'ledger: argument % must be a whole number of minor units, not %', argument, value
        using errcode = 'invalid_parameter_value',
              hint = 'send an integer (1500 for 15.00): an amount is never rounded';
end
$$;

revoke all on function ledger.money_value(jsonb,text) from public;
grant execute on function ledger.money_value(jsonb,text) to effect_agent, effect_operator, effect_readonly;
