-- Every effect as it stood at T, where a dispatched effect whose worker's
-- lease had run out by T is unknown (worker_lost) from the lease's end,
-- whether or not that has been written yet: the panes, counts and `show`
-- learn of a dead worker the moment its lease ends. Its version is the
-- row's: an operator who acts on what was shown acts on that version, and
-- operator_begin writes the loss first.
--
-- Three branches, so that a view's condition on a column still reaches the
-- table's own column (and its partial index) for every row no lease
-- changes: rows as they are, rows a lease that ran out makes unknown (read
-- from the few leases), and the past's versions.
create or replace function ledger.effects_at(at_time timestamptz) returns setof ledger.effects
language sql stable as $$
    select e.* from ledger.effects e
     where (at_time is null or e.updated_at <= at_time)
       and not (e.state = 'pending' and e.dispatched_at is not null
                and exists (select 1 from ledger.worker_leases w
                             where w.effect_id = e.id and w.lease_until < ledger.instant(at_time)))
    union all
    select e.id, e.op_key, e.action, e.target, e.params, e.params_hash, e.amount_minor, e.currency,
           e.provider, e.requested_by, e.owner_role, e.approval_ref, e.approval_version,
           e.request_id, 'unknown', w.lease_until, e.pending_window, e.deadline_at, e.external_ref,
           e.result, ledger.worker_lost_reason(w), e.retryable, e.late_result_at, e.attention,
           e.version, e.created_at, e.dispatched_at, e.dispatched_by, e.dispatched_role,
           e.updated_at, e.settled_at, e.compensates, e.held_by, e.duplicates_acknowledged_at,
           'worker_lost', e.retry_not_before, e.during, e.double_candidate,
           e.creation_version_stored, e.latest_version_in_row
      from ledger.worker_leases w
      join ledger.effects e on e.id = w.effect_id
     where w.lease_until < ledger.instant(at_time)
       and e.state = 'pending' and e.dispatched_at is not null
       and (at_time is null or e.updated_at <= at_time)
    union all
    select s.id, s.op_key, s.action, s.target, s.params, s.params_hash, s.amount_minor, s.currency,
           s.provider, s.requested_by, s.owner_role, s.approval_ref, s.approval_version,
           s.request_id,
           case when lost.effect_id is null then s.state else 'unknown' end,
           case when lost.effect_id is null then s.state_since else lost.lease_until end,
           s.pending_window, s.deadline_at, s.external_ref, s.result,
           case when lost.effect_id is null then s.failure_reason
                else ledger.worker_lost_reason(lost) end,
           s.retryable, s.late_result_at, s.attention, s.version, s.created_at, s.dispatched_at,
           s.dispatched_by, s.dispatched_role, s.updated_at, s.settled_at, s.compensates, s.held_by,
           s.duplicates_acknowledged_at,
           case when lost.effect_id is null then s.error_class else 'worker_lost' end,
           s.retry_not_before, s.during, s.double_candidate, s.creation_version_stored,
           s.latest_version_in_row
      from (
            select e.id, e.op_key, e.action, e.target, e.params, e.params_hash, e.amount_minor, e.currency,
                   e.provider, e.requested_by, e.owner_role, e.approval_ref, e.approval_version,
                   e.request_id, v.state, v.state_since, e.pending_window, v.deadline_at, v.external_ref,
                   e.result, v.failure_reason, v.retryable, v.late_result_at, v.attention, v.version,
                   e.created_at, v.dispatched_at, e.dispatched_by, e.dispatched_role, v.at as updated_at,
                   v.settled_at, e.compensates, v.held_by, v.duplicates_acknowledged_at, v.error_class,
                   v.retry_not_before, e.during, e.double_candidate, e.creation_version_stored,
                   e.latest_version_in_row
              from ledger.effects e
             cross join lateral (
                    select v.* from ledger.effect_history v
                     where v.effect_id = e.id and v.at <= at_time
                     order by v.version desc limit 1) v
             where at_time is not null and e.updated_at > at_time and e.created_at <= at_time
           ) s
      left join ledger.worker_leases lost
        on lost.effect_id = s.id and s.state = 'pending' and s.dispatched_at is not null
       and lost.lease_until < at_time
$$;

revoke all on function ledger.effects_at(timestamp with time zone) from public;
grant execute on function ledger.effects_at(timestamp with time zone) to effect_operator, effect_readonly;
