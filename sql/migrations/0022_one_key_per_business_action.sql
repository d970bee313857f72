-- One business action, one key, however its values are written
-- (docs/contract.md, "One business action, one key").
--
-- A key made from how a value is written rather than what it is gave one
-- refund two keys: 1500 and 1500.0, a structure in another key order,
-- "01500" and "+1500" for one amount. Here the ledger states the key form
-- once, as functions a SQL caller fills a template with, and the clients
-- and the gateway are held to the same cases (clients/scenarios.json,
-- "keys"). And begin_effect (restated once, in 0023) stores every number
-- of the params by its value, with ledger.params_by_value below, so the
-- params a key was made from and the params compared on a repeat are the
-- same values whoever spelt them.

-- Every number by its value: 1500.0 is 1500, 0.10 is 0.1, -0.0 is 0.
-- (jsonb already reads 1e20 and 1.5e3 as plain numbers; only a scale of
-- trailing zeros survives, which trim_scale drops.)
-- plpgsql rather than sql: a recursive sql function is planned again at
-- every level of every call (2,000 calls on four fields took 290-400 ms
-- as sql, 42-54 ms as this).
create function ledger.params_by_value(value jsonb) returns jsonb
language plpgsql immutable strict parallel safe as $$
declare
    kind text := jsonb_typeof(value);
    walked jsonb;
    member record;
begin
    if kind = 'number' then
        return to_jsonb(trim_scale(value::numeric));
    elsif kind = 'object' then
        walked := '{}'::jsonb;
        for member in select * from jsonb_each(value) loop
            walked := walked || jsonb_build_object(member.key, ledger.params_by_value(member.value));
        end loop;
        return walked;
    elsif kind = 'array' then
        walked := '[]'::jsonb;
        for member in select element.value from jsonb_array_elements(value) with ordinality as element(value, position)
                       order by element.position loop
            walked := walked || jsonb_build_array(ledger.params_by_value(member.value));
        end loop;
        return walked;
    end if;
    return value;
end
$$;

-- Canonical JSON, RFC 8785 as the model: members sorted by code point (the
-- byte order of UTF-8, hence collate "C"), numbers by value in plain
-- decimal, no whitespace. jsonb's own text of a string escapes exactly
-- what RFC 8785 does.
create function ledger.canonical_json(value jsonb) returns text
language sql immutable strict parallel safe as $$
    select case jsonb_typeof(value)
        when 'number' then trim_scale(value::numeric)::text
        when 'object' then '{' || coalesce(
            (select string_agg(to_jsonb(member.key)::text || ':' || ledger.canonical_json(member.value), ','
                               order by member.key collate "C")
               from jsonb_each(value) as member),
            '') || '}'
        when 'array' then '[' || coalesce(
            (select string_agg(ledger.canonical_json(element.value), ',' order by element.position)
               from jsonb_array_elements(value) with ordinality as element(value, position)),
            '') || ']'
        else value::text
    end
$$;

-- The Unicode White_Space characters at either end of a text, gone: what
-- the trim normaliser removes, and what makes a string blank. Written out
-- rather than [[:space:]], whose meaning follows the server's locale.
create function ledger.white_space_trimmed(value text) returns text
language sql immutable strict parallel safe as $$
    select regexp_replace(value,
        '^[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$',
        '', 'g')
$$;

-- What a placeholder of a key template becomes: a string as it is, a
-- number by value, a structure as canonical JSON; null for no value (a
-- JSON null, or a string of nothing but white space).
create function ledger.key_form(value jsonb) returns text
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

-- A string through the normalisers a tool asks for, in their order. Case
-- mapping is Unicode's full mapping (ICU's, where the server has it: the
-- database's own locale may be C, which maps ASCII only).
create function ledger.normalised(value text, normalisers jsonb) returns text
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

-- Money is a whole number of minor units: a number of integral value, or
-- a string of one in decimal. Anything else is refused, never rounded.
create function ledger.money_value(value jsonb, argument text) returns bigint
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

-- The arguments of a call as the key is made from them and the params are
-- stored: the money argument as its integer, the normalised arguments
-- normalised, every number by value.
create function ledger.canonical_arguments(arguments jsonb, normalise jsonb default null, money text default null)
returns jsonb
language sql stable parallel safe as $$
    select ledger.params_by_value(coalesce(
        (select jsonb_object_agg(member.key, case
                    when member.key = money and jsonb_typeof(member.value) <> 'null'
                        then to_jsonb(ledger.money_value(member.value, member.key))
                    when jsonb_typeof(member.value) = 'string' and normalise ? member.key
                        then to_jsonb(ledger.normalised(member.value #>> '{}', normalise -> member.key))
                    else member.value end)
           from jsonb_each(arguments) as member),
        '{}'::jsonb))
$$;

-- A key (or target) template filled from a call's arguments:
-- {name}, {name.field}, and {{ }} for literal braces. A placeholder with no
-- value is refused: two calls must not share a key because both lacked it.
create function ledger.key_from_template(
    template text, arguments jsonb, normalise jsonb default null, money text default null
) returns text
language plpgsql stable parallel safe as $$
declare
    canonical jsonb := ledger.canonical_arguments(arguments, normalise, money);
    filled text := '';
    position integer := 1;
    closing integer;
    placeholder text;
    value text;
    character text;
    found jsonb;
    field text;
begin
    if template is null or arguments is null or jsonb_typeof(arguments) <> 'object' then
        raise exception 'ledger: a key template and a JSON object of arguments are required'
            using errcode = 'invalid_parameter_value';
    end if;
    while position <= length(template) loop
        character := substr(template, position, 1);
        if substr(template, position, 2) in ('{{', '}}') then
            filled := filled || character;
            position := position + 2;
        elsif character = '{' then
            closing := strpos(substr(template, position + 1), '}');
            placeholder := btrim(substr(template, position + 1, closing - 1));
            if closing = 0 or placeholder = '' or strpos(placeholder, '{') > 0 then
                raise exception 'ledger: key template %: an unmatched brace or an empty placeholder (write {{ or }} for a literal one)',
                    template using errcode = 'invalid_parameter_value';
            end if;
            -- {name.field} walks objects only, as every writer does: an
            -- array's element is not a field.
            found := canonical;
            foreach field in array string_to_array(placeholder, '.') loop
                found := case when jsonb_typeof(found) = 'object' then found -> field end;
            end loop;
            value := ledger.key_form(found);
            if value is null then
                raise exception 'ledger: the arguments have no value for {%}: the key cannot be made', placeholder
                    using errcode = 'invalid_parameter_value';
            end if;
            filled := filled || value;
            position := position + closing + 1;
        elsif character = '}' then
            raise exception 'ledger: key template %: an unmatched brace (write }} for a literal one)', template
                using errcode = 'invalid_parameter_value';
        else
            filled := filled || character;
            position := position + 1;
        end if;
    end loop;
    return filled;
end
$$;

revoke execute on function ledger.params_by_value(jsonb), ledger.canonical_json(jsonb),
    ledger.white_space_trimmed(text), ledger.key_form(jsonb), ledger.normalised(text, jsonb),
    ledger.money_value(jsonb, text), ledger.canonical_arguments(jsonb, jsonb, text),
    ledger.key_from_template(text, jsonb, jsonb, text)
    from public;
grant execute on function ledger.params_by_value(jsonb), ledger.canonical_json(jsonb),
    ledger.white_space_trimmed(text), ledger.key_form(jsonb), ledger.normalised(text, jsonb),
    ledger.money_value(jsonb, text), ledger.canonical_arguments(jsonb, jsonb, text),
    ledger.key_from_template(text, jsonb, jsonb, text)
    to effect_agent, effect_operator, effect_readonly;
