-- What the reconcilers are doing, for their /metrics and the console.
create or replace view ledger.reconcile_backlog as
select count(*) filter (where l.claimed_until > now())            as leased,
       count(*) filter (where l.claimed_until is null and l.next_try_at > now()) as backing_off,
       count(*) filter (where l.escalated_at is not null)          as escalated,
       max(l.tries)                                                as most_tries
  from ledger.reconcile_leases l
  join ledger.effects e on e.id = l.effect_id and e.state in ('pending', 'unknown');

revoke all on ledger.reconcile_backlog from public;
grant select on ledger.reconcile_backlog to effect_operator, effect_readonly;
