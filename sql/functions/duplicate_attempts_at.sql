create or replace function ledger.duplicate_attempts_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, state text, attempts bigint,
    replays bigint, in_flight bigint, mismatches bigint, late_results bigint,
    first_seen timestamptz, last_seen timestamptz, requesters text[], has_mismatch boolean,
    version bigint, refused bigint, replays_last_hour bigint, needs_look boolean, look_reasons text[])
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, e.state, d.attempts, d.replays, d.in_flight,
           d.mismatches, d.late_results, d.first_seen, d.last_seen, d.requesters,
           d.mismatches > 0, e.version, d.refused, d.replays_last_hour,
           cardinality(why.reasons) > 0, why.reasons
      from (select a.effect_id,
                   count(*) as attempts,
                   count(*) filter (where a.kind = 'replay') as replays,
                   count(*) filter (where a.kind = 'in_flight') as in_flight,
                   count(*) filter (where a.kind = 'mismatch') as mismatches,
                   count(*) filter (where a.kind = 'late_result') as late_results,
                   count(*) filter (where a.kind in ('refused', 'dispatch_refused')) as refused,
                   count(*) filter (where a.kind = 'replay'
                                      and a.at > ledger.instant(at_time) - interval '1 hour') as replays_last_hour,
                   min(a.at) as first_seen,
                   max(a.at) as last_seen,
                   array_agg(distinct a.requested_by) filter (where a.requested_by is not null) as requesters
              from ledger.attempts a
             where ledger.counts_as_duplicate(a.kind)
               and ledger.shown_as_duplicate(a, (select x.duplicates_acknowledged_at
                                                   from ledger.effect_at(a.effect_id, at_time) x),
                                             at_time)
             group by a.effect_id) d
     cross join lateral ledger.effect_at(d.effect_id, at_time) e
     cross join lateral (
           select array_remove(array[
                      case when d.mismatches > 0 then 'mismatch' end,
                      case when d.late_results > 0 then 'late result' end,
                      case when d.refused > 0 then 'refused call' end,
                      case when d.in_flight > 0 then 'repeat in flight' end,
                      case when d.replays_last_hour > (ledger.policy_for(e.action)).replay_burst_per_hour
                           then 'replay burst' end], null) as reasons) why
$$;

revoke all on function ledger.duplicate_attempts_at(timestamp with time zone) from public;
grant execute on function ledger.duplicate_attempts_at(timestamp with time zone) to effect_operator, effect_readonly;
