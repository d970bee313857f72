-- A beat: the worker running `op_key`'s provider call is alive; its lease
-- runs `lease` from now. Answers whether the call is still the worker's to
-- finish: false when the effect is no longer pending and dispatched (it was
-- completed, or declared lost when an earlier lease ran out — a lease that
-- ran out is never renewed, so that what every view said stays true).
-- The first beat makes the lease. Only the effect's owner may beat for it.
-- The lease in force is the action's policy's when it sets one: answered,
-- so a worker that asked for another beats at a third of it.
create or replace function ledger.heartbeat(
    op_key text, lease interval default interval '15 seconds', worker text default null
) returns table (alive boolean, state text, lease_until timestamptz, lease_in_force interval)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect  ledger.effects;
    refusal text;
    until   timestamptz;
    held_to interval;
begin
    perform ledger.forget_caller_settings();
    perform ledger.check_lease(heartbeat.lease);
    -- No row lock: a beat must not queue behind the effect's completion.
    select e.* into effect from ledger.effects e where e.op_key = heartbeat.op_key;
    if not found then
        raise exception 'ledger: no effect with key %', heartbeat.op_key
            using errcode = 'no_data_found', hint = 'call ledger.begin_effect first';
    end if;
    refusal := ledger.writer_refusal(effect, 'beat for');
    if refusal is not null then
        raise exception 'ledger: %', refusal using errcode = 'insufficient_privilege';
    end if;
    if effect.state <> 'pending' or effect.dispatched_at is null then
        return query select false, effect.state, null::timestamptz, null::interval;
        return;
    end if;
    held_to := ledger.lease_in_force(effect.action, heartbeat.lease);
    insert into ledger.worker_leases as w (effect_id, worker, lease, lease_until)
    values (effect.id, heartbeat.worker, held_to, now() + held_to)
    on conflict (effect_id) do update
       set lease_until = excluded.lease_until, lease = excluded.lease,
           worker = coalesce(excluded.worker, w.worker), beats = w.beats + 1
     where w.lease_until >= now()
    returning w.lease_until into until;
    if until is not null then
        -- A beat that only moved its lease is not worth a wait for the
        -- disk: one lost in a server crash ends the lease sooner, and the
        -- call is then reconciled (its own answer still settles it). A
        -- beat that writes a loss, like every other write, stays durable.
        perform set_config('synchronous_commit', 'off', true);
        return query select true, effect.state, until, held_to;
        return;
    end if;
    -- The lease had run out before this beat: the worker was declared lost
    -- in every view, and is now in the ledger too.
    select e.* into effect from ledger.effects e where e.id = effect.id for update;
    effect := ledger.write_worker_lost(effect);
    return query select effect.state = 'pending', effect.state, null::timestamptz, null::interval;
end
$$;

revoke all on function ledger.heartbeat(text,interval,text) from public;
grant execute on function ledger.heartbeat(text,interval,text) to effect_agent;
