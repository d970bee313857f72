-- A string through the normalisers a tool asks for, in their order. Case
-- mapping is Unicode's full mapping (ICU's, where the server has it: the
-- database's own locale may be C, which maps ASCII only).
create or replace function ledger.normalised(value text, normalisers jsonb) returns text
language plpgsql stable parallel safe as $$
declare
    normaliser text;
    icu boolean := exists (select 1 from pg_catalog.pg_collation c where c.collname = 'und-x-icu');
begin
    if normalisers is null then
        return value;
    end if;
    if jsonb_typeof(normalisers) <> 'array' then
        raise exception 'ledger: normalisers are a JSON array of names (trim, lower, upper, nfc), not %', normalisers
            using errcode = 'invalid_parameter_value';
    end if;
    for normaliser in select n from jsonb_array_elements_text(normalisers) as n loop
        case normaliser
        when 'trim' then value := ledger.white_space_trimmed(value);
        when 'nfc' then value := normalize(value, nfc);
        when 'lower' then
            if icu then execute 'select lower($1 collate "und-x-icu")' into value using value;
            else value := lower(value); end if;
        when 'upper' then
            if icu then execute 'select upper($1 collate "und-x-icu")' into value using value;
            else value := upper(value); end if;
        else
            raise exception 'ledger: unknown normaliser % (known: trim, lower, upper, nfc)', normaliser
                using errcode = 'invalid_parameter_value';
        end case;
    end loop;
    return value;
end
$$;

revoke all on function ledger.normalised(text,jsonb) from public;
grant execute on function ledger.normalised(text,jsonb) to effect_agent, effect_operator, effect_readonly;
