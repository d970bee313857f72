-- What a placeholder of a key template becomes: a string as it is, a
-- number by value, a structure as canonical JSON; null for no value (a
-- JSON null, or a string of nothing but white space).
create or replace function ledger.key_form(value jsonb) returns text
language sql immutable strict parallel safe as $$
    select case jsonb_typeof(value)
        when 'string' then case when ledger.white_space_trimmed(value #>> '{}') = '' then null
                                else value #>> '{}' end
        when 'number' then trim_scale(value::numeric)::text
        when 'boolean' then value::text
        when 'null' then null
        else ledger.canonical_json(value)
    end
$$;

revoke all on function ledger.key_form(jsonb) from public;
grant execute on function ledger.key_form(jsonb) to effect_agent, effect_operator, effect_readonly;
