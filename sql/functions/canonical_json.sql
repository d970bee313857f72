-- Canonical JSON, RFC 8785 as the model: members sorted by code point (the
-- byte order of UTF-8, hence collate "C"), numbers by value in plain
-- decimal, no whitespace. jsonb's own text of a string escapes exactly
-- what RFC 8785 does.
create or replace function ledger.canonical_json(value jsonb) returns text
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

revoke all on function ledger.canonical_json(jsonb) from public;
grant execute on function ledger.canonical_json(jsonb) to effect_agent, effect_operator, effect_readonly;
