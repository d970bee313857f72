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
create or replace function ledger.lease_for_reconcile(
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

revoke all on function ledger.lease_for_reconcile(text,interval,interval,integer,timestamp with time zone) from public;
grant execute on function ledger.lease_for_reconcile(text,interval,interval,integer,timestamp with time zone) to effect_operator;
