-- A new key claimed as it is created: one write of the row, not two.
--
-- begin_and_dispatch on a new key inserted the effect (begin_effect) and
-- then updated it (mark_dispatched's claim): two writes of the row, each
-- through the row's guard, and the second through every update trigger.
-- Now open_effect, told the caller dispatches at once, inserts the plain
-- new key already claimed, at version 2, with both versions the row's own,
-- as the two writes left them: the history, the attempts (one dispatch)
-- and the lease are the same; only the work is less. Every other answer
-- (a retry, a held key, an approval, a booking) is claimed as before.
--
-- open_effect gains the claim and the worker; begin_effect's checks move to
-- begin_checked, which both begin_effect and begin_and_dispatch call.
drop function ledger.open_effect(text, text, text, jsonb, text, interval, bigint, text, text, text, integer,
                                 text, tstzrange);
