-- A success marks the escalation delivered whichever claim it came from (it
-- was delivered); a failure counts only for the current claim, and sets the
-- next attempt after the backoff the worker computed.
create or replace function ledger.record_escalation_delivery(
    escalation_key text, attempt integer, worker text, ok boolean,
    error text default null, retry_after interval default interval '30 seconds',
    duration_ms integer default null
) returns table (state text, delivery_attempts integer, next_attempt_at timestamptz)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    escalation ledger.escalations;
begin
    perform ledger.forget_caller_settings();
    select s.* into escalation from ledger.escalations s
     where s.escalation_key = record_escalation_delivery.escalation_key
       for update;
    if not found then
        raise exception 'ledger: no escalation with key %', record_escalation_delivery.escalation_key
            using errcode = 'EW404';
    end if;
    insert into ledger.escalation_deliveries (escalation_id, attempt, worker, ok, error, duration_ms)
    values (escalation.id, record_escalation_delivery.attempt, record_escalation_delivery.worker,
            record_escalation_delivery.ok, left(record_escalation_delivery.error, 1000),
            record_escalation_delivery.duration_ms);
    if escalation.state in ('open', 'failed') then
        if record_escalation_delivery.ok then
            update ledger.escalations s
               set state = 'delivered', delivered_at = now(), last_error = null, updated_at = now()
             where s.id = escalation.id
            returning s.* into escalation;
        elsif escalation.delivery_attempts = record_escalation_delivery.attempt then
            update ledger.escalations s
               set state = 'failed', last_error = left(record_escalation_delivery.error, 1000),
                   next_attempt_at = now() + greatest(coalesce(record_escalation_delivery.retry_after,
                                                               interval '30 seconds'), interval '0'),
                   updated_at = now()
             where s.id = escalation.id
            returning s.* into escalation;
        end if;
    end if;
    return query select escalation.state, escalation.delivery_attempts, escalation.next_attempt_at;
end
$$;

revoke all on function ledger.record_escalation_delivery(text,integer,text,boolean,text,interval,integer) from public;
grant execute on function ledger.record_escalation_delivery(text,integer,text,boolean,text,interval,integer) to effect_operator;
