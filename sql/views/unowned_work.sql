-- Work nobody is on: a flag on an effect, or a compensation not sent, with
-- no open next step, no escalation (a person was never told) and no request
-- waiting for approval. Empty on a healthy ledger; `effectwatch check`
-- reports what it holds.
create or replace view ledger.unowned_work as
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

revoke all on ledger.unowned_work from public;
grant select on ledger.unowned_work to effect_operator, effect_readonly;
