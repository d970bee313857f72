-- After the insert, so that an insert that does nothing (ON CONFLICT) keeps
-- nothing; only for a creation that has a version row of its own.
create or replace function ledger.effects_history() returns trigger
language plpgsql as $$
begin
    perform ledger.keep_version(null, new, not ledger.changes_no_pane('INSERT', null, new));
    return null;
end
$$;

revoke all on function ledger.effects_history() from public;
