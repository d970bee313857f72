-- Step 3: only a caller that gets claimed = true may call the provider.
create or replace function ledger.op_dispatch_compensation(compensation_key text, operator text)
returns table (claimed boolean, state text, dispatched_at timestamptz, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    compensation ledger.effects;
    before   jsonb;
    dispatch record;
    seq      bigint;
begin
    perform ledger.forget_caller_settings();
    compensation := ledger.lock_compensation(op_dispatch_compensation.compensation_key,
                                             op_dispatch_compensation.operator);
    before := ledger.effect_snapshot(compensation);
    -- Never received by the provider (a reconciliation found it absent):
    -- the decision to reverse stands, so the same key is sent again, as an
    -- agent's safe retry would be. The key is the provider's guard against
    -- a first request that lands late.
    if ledger.compensation_in_play(compensation) and compensation.state = 'failed' then
        perform set_config('ledger.reason', 'never received by the provider: sent again under its key', true);
        update ledger.effects e
           set state = 'pending', dispatched_at = null, dispatched_by = null,
               failure_reason = null, retryable = null, error_class = null, retry_not_before = null,
               deadline_at = now() + e.pending_window
         where e.id = compensation.id
        returning e.* into compensation;
    end if;
    select d.claimed into dispatch
      from ledger.claim_dispatch(compensation, null, op_dispatch_compensation.operator) d;
    select e.* into compensation from ledger.effects e where e.id = compensation.id;
    -- Claimed here, or already dispatched or settled: either way it is no
    -- longer waiting to be sent.
    perform ledger.close_next_step(compensation.id, 'send_compensation', op_dispatch_compensation.operator,
                                   case when dispatch.claimed then 'dispatched'
                                        else 'not sent: ' || compensation.state end);
    if not dispatch.claimed then
        return query select false, compensation.state, compensation.dispatched_at, null::bigint;
        return;
    end if;
    perform set_config('ledger.actor', op_dispatch_compensation.operator, true);
    seq := ledger.audit(op_dispatch_compensation.operator, 'dispatch_compensation', compensation,
                        'sent to ' || coalesce(compensation.provider, 'the provider'),
                        before, ledger.effect_snapshot(compensation));
    return query select true, compensation.state, compensation.dispatched_at, seq;
end
$$;

revoke all on function ledger.op_dispatch_compensation(text,text) from public;
grant execute on function ledger.op_dispatch_compensation(text,text) to effect_operator;
