-- The reconciler service: any number of `effectwatch reconcile --watch`
-- processes settle what rules can settle, through the same audited
-- operator functions as a person. Each effect is leased to one of them at a
-- time, a killed one's leases expire, and an effect the provider cannot
-- answer for is asked again later, less and less often.
--
-- A lease is coordination between reconcilers, not a change to an effect:
-- it has no audit entry of its own. What a reconciler does under it (the
-- reconciliation, the escalation) is audited by the functions it calls.

-- What a reconciler may take up now: effects unknown for `grace`, and
-- pending ones dispatched and past their window by `grace` (an agent's
-- late answer often comes in that time), that no person has been asked
-- about (attention set) and that no live lease or backoff holds.
--
-- No row of ledger.effects is locked: a lease statement that held effect
-- rows while it waited on another reconciler's lease rows stalled that
-- reconciler's own settling, and two reconcilers ran at a third of one's
-- speed. Exclusion comes from the lease row alone: the upsert takes a lease
-- only where none is live, none is backing off, and the effect was not seen
-- settled since this statement's reading of it (settled_version). Each
-- reconciler walks the candidates in an order of its own, so concurrent
-- statements rarely reach for the same rows; one that finds all of its
-- picks taken reads again (up to three times) before it says nothing is due.
-- `due_before` (a pass's start) keeps a pass from taking up again what it
-- already asked about: a short backoff may be over before the pass is.
create function ledger.lease_for_reconcile(
    reconciler text, lease interval, grace interval, batch integer, due_before timestamptz default null
) returns table (op_key text, version bigint, state text, tries integer,
                retry_semantics text, escalation_sink text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    taken integer;
    order_seed integer := hashtext(lease_for_reconcile.reconciler);
begin
    perform ledger.forget_caller_settings();
    if coalesce(btrim(lease_for_reconcile.reconciler), '') = '' then
        raise exception 'ledger: a reconciler name is required' using errcode = 'invalid_parameter_value';
    end if;
    if lease_for_reconcile.lease is null or lease_for_reconcile.lease <= interval '0'
       or lease_for_reconcile.batch is null or lease_for_reconcile.batch < 1 then
        raise exception 'ledger: a lease must be positive and a batch at least 1'
            using errcode = 'invalid_parameter_value';
    end if;
    for attempt in 1..3 loop
        return query
        with candidates as (
            select e.id from ledger.effects e
             where e.state = 'unknown' and e.attention is null
               and e.state_since < now() - coalesce(lease_for_reconcile.grace, interval '0')
            union all
            select e.id from ledger.effects e
             where e.state = 'pending' and e.dispatched_at is not null and e.attention is null
               and e.deadline_at < now() - coalesce(lease_for_reconcile.grace, interval '0')
        ), due as (
            select e.id, e.op_key, e.version, e.state, e.action
              from ledger.effects e
              join candidates c on c.id = e.id
              left join ledger.reconcile_leases l on l.effect_id = e.id
             where (l.effect_id is null
                    or (e.version > coalesce(l.settled_version, 0)
                        and l.next_try_at <= least(now(), lease_for_reconcile.due_before)
                        and (l.claimed_until is null or l.claimed_until < now())))
               -- An action whose policy leaves every doubt to a person is
               -- handed over once, not asked about again.
               and not (l.escalated_at is not null
                        and (ledger.policy_for(e.action)).retry_semantics = 'escalate')
             order by hashtextextended(e.op_key, order_seed)
             limit lease_for_reconcile.batch
        ), leased as (
            insert into ledger.reconcile_leases as l (effect_id, claimed_by, claimed_until, settled_version)
            -- In id order whatever the walk's: concurrent upserts that meet
            -- on a row then wait in one order, never on each other.
            select d.id, lease_for_reconcile.reconciler, now() + lease_for_reconcile.lease, null from due d
             order by d.id
            on conflict (effect_id) do update
               set claimed_by = excluded.claimed_by, claimed_until = excluded.claimed_until
             where l.next_try_at <= now() and (l.claimed_until is null or l.claimed_until < now())
               and (select f.version from ledger.effects f where f.id = l.effect_id)
                   > coalesce(l.settled_version, 0)
            returning l.effect_id, l.tries
        )
        select d.op_key, d.version, d.state, leased.tries, p.retry_semantics, p.escalation_sink
          from due d join leased on leased.effect_id = d.id
          cross join lateral ledger.policy_for(d.action) p
         order by d.id;
        get diagnostics taken = row_count;
        exit when taken > 0;
    end loop;
end
$$;

-- Ends a lease after a pass over the effect. An effect the pass settled
-- leaves the reconciler's books; one still open is asked again after
-- `backoff` doubled per try, at most `backoff_max`. Returns the tries so
-- far and whether a person was already asked. A lease that expired and
-- passed to another reconciler is not this one's to end: nothing changes.
create function ledger.end_reconcile_lease(
    op_key text, reconciler text, finding text, backoff interval, backoff_max interval
) returns table (tries integer, escalated boolean, settled boolean)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    effect ledger.effects;
    lease  ledger.reconcile_leases;
begin
    perform ledger.forget_caller_settings();
    select e.* into effect from ledger.effects e where e.op_key = end_reconcile_lease.op_key;
    if not found then
        raise exception 'ledger: no effect with key %', end_reconcile_lease.op_key using errcode = 'EW404';
    end if;
    select l.* into lease from ledger.reconcile_leases l
     where l.effect_id = effect.id for update;
    if not found or lease.claimed_by is distinct from end_reconcile_lease.reconciler then
        return query select coalesce(lease.tries, 0), lease.escalated_at is not null, false;
        return;
    end if;
    if effect.state not in ('pending', 'unknown') then
        -- Off the books until the effect opens again (a safe retry): the
        -- version it was seen settled at keeps stale readings from leasing it.
        update ledger.reconcile_leases l
           set claimed_by = null, claimed_until = null, tries = 0, escalated_at = null,
               last_finding = end_reconcile_lease.finding, last_try_at = now(),
               settled_version = effect.version
         where l.effect_id = effect.id;
        return query select lease.tries + 1, lease.escalated_at is not null, true;
        return;
    end if;
    update ledger.reconcile_leases l
       set claimed_by = null, claimed_until = null, tries = l.tries + 1,
           last_finding = end_reconcile_lease.finding, last_try_at = now(),
           next_try_at = now() + least(
               coalesce(end_reconcile_lease.backoff_max, interval '1 hour'),
               coalesce(end_reconcile_lease.backoff, interval '30 seconds') * power(2, least(l.tries, 20)))
     where l.effect_id = effect.id
    returning l.* into lease;
    return query select lease.tries, lease.escalated_at is not null, false;
end
$$;

-- Marks that a person was asked about the effect, so no reconciler asks
-- again; the escalation itself is written by ledger.open_escalation.
create function ledger.mark_reconcile_escalated(op_key text, reconciler text) returns void
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    perform ledger.forget_caller_settings();
    insert into ledger.reconcile_leases as l (effect_id, escalated_at)
    select e.id, now() from ledger.effects e where e.op_key = mark_reconcile_escalated.op_key
    on conflict (effect_id) do update set escalated_at = coalesce(l.escalated_at, now());
end
$$;

-- What the reconcilers are doing, for their /metrics and the console.
create view ledger.reconcile_backlog as
select count(*) filter (where l.claimed_until > now())            as leased,
       count(*) filter (where l.claimed_until is null and l.next_try_at > now()) as backing_off,
       count(*) filter (where l.escalated_at is not null)          as escalated,
       max(l.tries)                                                as most_tries
  from ledger.reconcile_leases l
  join ledger.effects e on e.id = l.effect_id and e.state in ('pending', 'unknown');

-- Next steps (ledger.next_steps): what a flow of several steps still owes.
-- A step is recorded by the function that takes the step before it, in its
-- transaction, and closed by the function that takes it, in its own; in
-- between, any reconciler claims it for a lease, as it leases effects.

-- Records a step owed on an effect; one of that kind already open stays.
create function ledger.record_next_step(effect_id bigint, step text, why text, recorded_by text)
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    insert into ledger.next_steps (effect_id, step, why, recorded_by)
    values (record_next_step.effect_id, record_next_step.step, record_next_step.why,
            coalesce(nullif(btrim(record_next_step.recorded_by), ''), 'ledger'))
    on conflict (effect_id, step) where done_at is null do nothing
$$;

-- Closes the open step of that kind on an effect: the step was taken (or
-- is no longer owed) in the caller's transaction.
create function ledger.close_next_step(effect_id bigint, step text, done_by text, outcome text)
returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
    update ledger.next_steps s
       set done_at = now(), done_by = close_next_step.done_by, outcome = close_next_step.outcome,
           claimed_by = null, claimed_until = null
     where s.effect_id = close_next_step.effect_id and s.step = close_next_step.step
       and s.done_at is null
$$;

-- Claims up to `batch` due steps no live claim holds, for `lease`, but
-- those in `taken` (what this pass already took up: a step left open with a
-- short backoff waits for the next pass). A killed reconciler's claims
-- expire and the steps are due again.
create function ledger.claim_next_steps(reconciler text, lease interval, batch integer,
                                        taken bigint[] default '{}')
returns table (step_id bigint, op_key text, step text, why text, tries integer,
               escalation_sink text, original_key text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    perform ledger.forget_caller_settings();
    if coalesce(btrim(claim_next_steps.reconciler), '') = '' then
        raise exception 'ledger: a reconciler name is required' using errcode = 'invalid_parameter_value';
    end if;
    if claim_next_steps.lease is null or claim_next_steps.lease <= interval '0'
       or claim_next_steps.batch is null or claim_next_steps.batch < 1 then
        raise exception 'ledger: a lease must be positive and a batch at least 1'
            using errcode = 'invalid_parameter_value';
    end if;
    return query
    with due as (
        select s.id from ledger.next_steps s
         where s.done_at is null and s.due_at <= now()
           and (s.claimed_until is null or s.claimed_until < now())
           and s.id <> all (coalesce(claim_next_steps.taken, '{}'))
         order by s.due_at, s.id
         limit claim_next_steps.batch
           for update skip locked
    ), claimed as (
        update ledger.next_steps s
           set claimed_by = claim_next_steps.reconciler, claimed_until = now() + claim_next_steps.lease
          from due where s.id = due.id
        returning s.id, s.effect_id, s.step, s.why, s.tries
    )
    -- A compensation's sink is its original action's.
    select c.id, e.op_key, c.step, c.why, c.tries, p.escalation_sink, o.op_key
      from claimed c
      join ledger.effects e on e.id = c.effect_id
      left join ledger.effects o on o.id = e.compensates
     cross join lateral ledger.policy_for(coalesce(o.action, e.action)) p
     order by c.id;
end
$$;

-- Ends this reconciler's claim on a step. `done`: it was taken, or is no
-- longer owed (`outcome` says which). Otherwise it is due again after
-- `backoff` doubled per try, at most `backoff_max`, with `outcome` as its
-- last error. A step the taking function closed, or that another
-- reconciler claimed since, is left as it is. Returns its tries and
-- whether it is still open.
create function ledger.end_next_step(
    step_id bigint, reconciler text, done boolean, outcome text, backoff interval, backoff_max interval
) returns table (tries integer, open boolean)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    owed ledger.next_steps;
begin
    perform ledger.forget_caller_settings();
    select s.* into owed from ledger.next_steps s where s.id = end_next_step.step_id for update;
    if not found then
        raise exception 'ledger: no next step %', end_next_step.step_id using errcode = 'EW404';
    end if;
    if owed.done_at is not null or owed.claimed_by is distinct from end_next_step.reconciler then
        return query select owed.tries, owed.done_at is null;
        return;
    end if;
    if end_next_step.done then
        update ledger.next_steps s
           set done_at = now(), done_by = end_next_step.reconciler, outcome = end_next_step.outcome,
               claimed_by = null, claimed_until = null
         where s.id = owed.id;
        return query select owed.tries, false;
        return;
    end if;
    update ledger.next_steps s
       set claimed_by = null, claimed_until = null, tries = s.tries + 1, last_error = end_next_step.outcome,
           due_at = now() + least(
               coalesce(end_next_step.backoff_max, interval '1 hour'),
               coalesce(end_next_step.backoff, interval '30 seconds') * power(2, least(s.tries, 20)))
     where s.id = owed.id
    returning s.* into owed;
    return query select owed.tries, true;
end
$$;

-- Work nobody is on: a flag on an effect, or a compensation not sent, with
-- no open next step, no escalation (a person was never told) and no request
-- waiting for approval. Empty on a healthy ledger; `effectwatch check`
-- reports what it holds.
create view ledger.unowned_work as
select e.op_key, e.state,
       case when e.compensates is not null and e.state = 'pending' then 'send the compensation'
            else 'decide the ' || e.attention end as owed
  from ledger.effects e
 where ((e.attention is not null and e.state <> 'cancelled')
        or (e.compensates is not null and e.state = 'pending' and e.dispatched_at is null))
   and not exists (select 1 from ledger.next_steps s where s.effect_id = e.id and s.done_at is null)
   and not exists (select 1 from ledger.escalations x where x.effect_id = e.id)
   and not exists (select 1 from ledger.compensation_requests r
                    where r.effect_id = e.id and r.state = 'awaiting_approval');
