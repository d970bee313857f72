-- The writer calls beyond the happy path's own, so duplicates and
-- mismatches can be seen and replayed: every call for a key that already
-- exists, each dispatch claim, refused calls, repeated and late results. The
-- first call and the outcome are the effect's row and its versions (who,
-- when, why), so the path of an effect that goes well writes no attempt
-- beyond its dispatch.
-- The attempts that make a key a duplicate: a call for a key that already
-- existed, whatever it was answered. One list, for the index, the pane and
-- the reports.
create or replace function ledger.counts_as_duplicate(kind text) returns boolean
language sql immutable parallel safe as $$
    select kind in ('replay', 'in_flight', 'retry', 'stop', 'mismatch', 'held', 'wait',
                    'late_result', 'dispatch_refused', 'refused')
$$;

revoke all on function ledger.counts_as_duplicate(text) from public;
grant execute on function ledger.counts_as_duplicate(text) to effect_operator, effect_readonly;
