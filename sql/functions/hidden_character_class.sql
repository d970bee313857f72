-- Keys, actions and targets are identities people compare by eye. A control
-- or format character (Unicode categories Cc and Cf: zero-width spaces and
-- joiners, bidi controls, soft hyphens, tags…) would hide a difference
-- between two keys or drive the terminal that shows them, so the table
-- refuses them whoever writes (the state machine's guard trigger, 0002,
-- checks every new effect; the three never change after). The class of
-- such characters, written once:
create or replace function ledger.hidden_character_class() returns text
language sql immutable parallel safe
as $$
    select '[\x01-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'::text
$$;

revoke all on function ledger.hidden_character_class() from public;
