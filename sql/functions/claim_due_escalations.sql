-- Delivery: a worker claims due escalations for a lease (skipping those
-- another console is delivering), delivers, and records the outcome. The
-- lease makes two consoles deliver one escalation at most once between
-- them while both live; after a crash the lease runs out and delivery is
-- retried, with the escalation key as the sink's dedup key.
create or replace function ledger.claim_due_escalations(
    worker text, lease interval default interval '60 seconds', max_items integer default 20,
    only_key text default null
) returns table (escalation_key text, sink text, payload jsonb, attempt integer)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    perform ledger.forget_caller_settings();
    if coalesce(btrim(worker), '') = '' then
        raise exception 'ledger: a worker name is required' using errcode = 'invalid_parameter_value';
    end if;
    return query
    with due as (
        select s.id from ledger.escalations s
         where s.state in ('open', 'failed')
           and s.next_attempt_at <= now()
           and (claim_due_escalations.only_key is null or s.escalation_key = claim_due_escalations.only_key)
         order by s.next_attempt_at, s.id
         limit greatest(coalesce(claim_due_escalations.max_items, 20), 1)
           for update skip locked)
    update ledger.escalations s
       set delivery_attempts = s.delivery_attempts + 1,
           next_attempt_at = now() + coalesce(claim_due_escalations.lease, interval '60 seconds'),
           updated_at = now()
      from due
     where s.id = due.id
    returning s.escalation_key, s.sink, s.payload, s.delivery_attempts;
end
$$;

revoke all on function ledger.claim_due_escalations(text,interval,integer,text) from public;
grant execute on function ledger.claim_due_escalations(text,interval,integer,text) to effect_operator;
