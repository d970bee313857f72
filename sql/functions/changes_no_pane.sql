-- Whether a change of an effect's row alters no pane, so consoles need not
-- be told of it. Acknowledging a key's repeats (or reopening them) does: it
-- takes the key off (or puts it back on) the duplicates pane while the
-- effect is still pending within its window.
create or replace function ledger.changes_no_pane(operation text, old ledger.effects, new ledger.effects)
returns boolean
language sql stable as $$
    select case when operation = 'INSERT' then (new).state = 'pending'
                else (old).state = 'pending'
                     and (new).state in ('pending', 'succeeded', 'failed')
                     and ((old).deadline_at is null or (old).deadline_at >= now())
                     and (new).attention is not distinct from (old).attention
                     and (new).late_result_at is not distinct from (old).late_result_at
                     and (new).duplicates_acknowledged_at
                         is not distinct from (old).duplicates_acknowledged_at end
$$;

revoke all on function ledger.changes_no_pane(text,ledger.effects,ledger.effects) from public;
