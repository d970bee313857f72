-- How the compensation of an effect stands: 'awaiting_approval' (a request
-- waits for a second operator), the state of its latest compensation effect
-- ('pending', 'dispatched', 'held', 'unknown', 'succeeded', 'failed',
-- 'cancelled'), 'rejected' (the last request was turned down) or 'none'.
create or replace function ledger.compensation_status_at(effect_id bigint, at_time timestamptz,
                                              out status text, out compensation_key text)
language sql stable as $$
    select case
               when req.state = 'awaiting_approval' then 'awaiting_approval'
               when comp.op_key is not null then comp.status
               when req.state = 'rejected' then 'rejected'
               else 'none' end,
           case when req.state is distinct from 'awaiting_approval' then comp.op_key end
      from (select 1) one
      left join lateral (
            select c.op_key,
                   case when c.state = 'pending' and c.dispatched_at is not null then 'dispatched'
                        else c.state end as status
              from ledger.effects_at(compensation_status_at.at_time) c
             where c.compensates = compensation_status_at.effect_id
               and ledger.reverses_the_effect(c.params)
             order by c.id desc limit 1) comp on true
      left join lateral (
            select r.state from ledger.compensation_requests_at(compensation_status_at.at_time) r
             where r.effect_id = compensation_status_at.effect_id
             order by r.id desc limit 1) req on true
$$;

revoke all on function ledger.compensation_status_at(bigint,timestamp with time zone) from public;
grant execute on function ledger.compensation_status_at(bigint,timestamp with time zone) to effect_operator, effect_readonly;
