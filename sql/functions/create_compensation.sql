-- Creates the compensation effect through the writer API, so it is an
-- effect like any other (attempts, events, panes), then links it. The
-- caller holds the original's row lock.
create or replace function ledger.create_compensation(
    original ledger.effects, requested_by text, operator text, approval_ref text,
    reverses_duplicate text default null
) returns ledger.effects
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    n       integer;
    key     text;
    begun   record;
    created ledger.effects;
begin
    -- The writer API refuses these keys to agents, but a key taken anyway
    -- (by hand, by a superuser) is skipped: nothing may block a compensation.
    select 1 + count(*) into n from ledger.effects c
     where c.compensates = (original).id and c.state in ('failed', 'cancelled');
    loop
        key := ledger.compensation_key((original).op_key, n);
        exit when not exists (select 1 from ledger.effects e where e.op_key = key);
        n := n + 1;
    end loop;
    select b.decision, b.effect_id into begun
      from ledger.open_effect(
            op_key => key, action => 'compensate', target => (original).target,
            params => jsonb_strip_nulls(jsonb_build_object(
                'compensates', (original).op_key, 'action', (original).action,
                'external_ref', coalesce(create_compensation.reverses_duplicate, (original).external_ref),
                'reverses_duplicate', create_compensation.reverses_duplicate,
                'amount_minor', (original).amount_minor, 'currency', (original).currency)),
            requested_by => create_compensation.requested_by,
            amount_minor => (original).amount_minor, currency => (original).currency,
            provider => (original).provider,
            approval_ref => create_compensation.approval_ref) b;
    if begun.decision not in ('proceed', 'held') then
        raise exception 'ledger: key % is already used by another effect (%): cannot compensate %',
            key, begun.decision, (original).op_key
            using errcode = 'EW422', hint = 'inspect that key with effectwatch show';
    end if;
    -- begin_effect acted as the requester; the rest of the call is the operator's.
    perform set_config('ledger.actor', create_compensation.operator, true);
    update ledger.effects e set compensates = (original).id
     where e.id = begun.effect_id
    returning e.* into created;
    -- Sending it is the next step, owed from this transaction on: a caller
    -- that dies before it claims the dispatch leaves it to any reconciler.
    if begun.decision = 'proceed' then
        perform ledger.record_next_step(created.id, 'send_compensation',
                                        'compensation of ' || (original).op_key || ' created: send it to '
                                        || coalesce((original).provider, 'the provider'),
                                        create_compensation.operator);
    end if;
    return created;
end
$$;

revoke all on function ledger.create_compensation(ledger.effects,text,text,text,text) from public;
