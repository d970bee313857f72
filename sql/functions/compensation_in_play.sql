-- Whether a compensation is still in play: open, succeeded, or never
-- received by the provider and owed to be sent again under its key (a next
-- step). Failed and cancelled ones are history, and a new one may follow.
create or replace function ledger.compensation_in_play(compensation ledger.effects) returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select (compensation).state in ('pending', 'held', 'unknown', 'succeeded')
        or ((compensation).state = 'failed' and coalesce((compensation).retryable, false)
            and exists (select 1 from ledger.next_steps s
                         where s.effect_id = (compensation).id and s.step = 'send_compensation'
                           and s.done_at is null))
$$;

revoke all on function ledger.compensation_in_play(ledger.effects) from public;
