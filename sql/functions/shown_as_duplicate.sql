-- One row per key called again (ledger.counts_as_duplicate). A pane, not
-- an archive: the last day's repeats, and every flagged one (a mismatch, a
-- late result, a refused call) until an operator acknowledges them
-- (ledger.op_acknowledge_duplicates) or the ledger is pruned.
-- Whether one attempt puts its key in the duplicates pane at an instant:
-- a kind that counts, made by then, within the last day or flagged, and
-- after the key's repeats were last acknowledged. The pane and the rule of
-- which actions apply (ledger.why_not) both ask it; a plain SQL expression,
-- so the planner inlines it and the partial index still serves the pane.
create or replace function ledger.shown_as_duplicate(attempt ledger.attempts, acknowledged_at timestamptz,
                                          at_time timestamptz) returns boolean
language sql stable as $$
    select ledger.counts_as_duplicate((attempt).kind)
       and (attempt).at <= ledger.instant(at_time)
       and ((attempt).at > ledger.instant(at_time) - interval '24 hours' or (attempt).flagged)
       and (attempt).at > coalesce(acknowledged_at, '-infinity')
$$;

revoke all on function ledger.shown_as_duplicate(ledger.attempts,timestamp with time zone,timestamp with time zone) from public;
grant execute on function ledger.shown_as_duplicate(ledger.attempts,timestamp with time zone,timestamp with time zone) to effect_operator, effect_readonly;
