-- The Unicode White_Space characters at either end of a text, gone: what
-- the trim normaliser removes, and what makes a string blank. Written out
-- rather than [[:space:]], whose meaning follows the server's locale.
create or replace function ledger.white_space_trimmed(value text) returns text
language sql immutable strict parallel safe as $$
    select regexp_replace(value,
        '^[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$',
        '', 'g')
$$;

revoke all on function ledger.white_space_trimmed(text) from public;
grant execute on function ledger.white_space_trimmed(text) to effect_agent, effect_operator, effect_readonly;
