-- A key (or target) template filled from a call's arguments:
-- {name}, {name.field}, and {{ }} for literal braces. A placeholder with no
-- value is refused: two calls must not share a key because both lacked it.
create or replace function ledger.key_from_template(
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

revoke all on function ledger.key_from_template(text,jsonb,jsonb,text) from public;
grant execute on function ledger.key_from_template(text,jsonb,jsonb,text) to effect_agent, effect_operator, effect_readonly;
