-- Schema version 1 + this: a key asked again after its window passed with
-- no answer is an unknown outcome.
--
-- A caller that dispatched an effect and died (killed after the provider
-- call, its reply lost) leaves the effect pending; when the same business
-- action is asked for again after the effect's window, nobody is waiting
-- for that first call any more. The effect may or may not exist at the
-- provider: it moves to `unknown`, into the unknown pane and the
-- reconciler's hands, and the caller is told `in_flight` as before — never
-- to call. Within its window a repeat stays pending (the first call may
-- still answer), and a late answer from the first caller still settles it
-- (unknown → succeeded or failed).
--
-- The rule sits on the attempt that records the repeat, so that begin_effect
-- (and every other place that answers in_flight) keeps one definition. Only
-- an attempt made now counts: history moved between partitions is inserted
-- again, and must not settle anything.
create function ledger.presume_lost_when_asked_again() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if new.at <> now() then
        return null;
    end if;
    perform set_config('ledger.reason',
        'asked again after its window passed with no answer: the call that dispatched it is presumed lost',
        true);
    update ledger.effects e
       set state = 'unknown',
           error_class = 'timeout',
           failure_reason = 'no answer within its window, and the same key was asked for again'
     where e.id = new.effect_id
       and e.state = 'pending'
       and e.dispatched_at is not null
       and e.deadline_at < now();
    return null;
end
$$;

create trigger attempts_presume_lost
    after insert on ledger.attempts
    for each row when (new.kind = 'in_flight')
    execute function ledger.presume_lost_when_asked_again();
alter table ledger.attempts enable always trigger attempts_presume_lost;

-- Fired by the ledger alone: no login calls it.
revoke all on function ledger.presume_lost_when_asked_again() from public;
