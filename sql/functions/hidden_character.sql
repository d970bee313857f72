-- The first such character as `U+200B at 4`, or null when the text is
-- clean: for the message that refuses it (only ever on that path).
create or replace function ledger.hidden_character(value text) returns text
language sql immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select 'U+' || upper(lpad(to_hex(ascii(c.ch)), greatest(4, length(to_hex(ascii(c.ch)))), '0'))
           || ' at ' || c.position
      from unnest(string_to_array(value, null)) with ordinality as c(ch, position)
     where ledger.has_hidden_character(c.ch)
     order by c.position
     limit 1
$$;

revoke all on function ledger.hidden_character(text) from public;
