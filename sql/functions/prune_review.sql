-- Why an old settled effect must stay; null: it may be pruned.
create or replace function ledger.prune_review(cutoff timestamptz)
returns table (effect_id bigint, op_key text, state text, kept_because text)
language sql stable as $$
    with old as (
        select e.* from ledger.effects e
         where e.settled_at is not null and e.settled_at < prune_review.cutoff
    ),
    suspected as (
        select s.effect_id from ledger.suspected_double_effects_at(null, null) s
    )
    select o.id, o.op_key, o.state,
           case
               when o.state not in ('succeeded', 'failed', 'cancelled') then o.state
               when o.state = 'failed' and coalesce(o.retryable, false) then 'retryable'
               when o.attention is not null or o.late_result_at is not null then 'needs_attention'
               when exists (select 1 from ledger.audit_log a where a.effect_id = o.id) then 'operator_action'
               when exists (select 1 from ledger.escalations s where s.effect_id = o.id) then 'escalated'
               when o.compensates is not null
                    or exists (select 1 from ledger.effects x where x.compensates = o.id or x.held_by = o.id)
                    or exists (select 1 from ledger.holds h where h.effect_id = o.id or h.holder_id = o.id)
                    or exists (select 1 from ledger.compensation_requests r
                                where r.effect_id = o.id or r.compensation_id = o.id) then 'linked'
               when o.id in (select s.effect_id from suspected s) then 'suspected_double'
           end
      from old o
$$;

revoke all on function ledger.prune_review(timestamp with time zone) from public;
