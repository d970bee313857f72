-- Money at risk per currency (effects without an amount are not money):
-- in unknown effects, in suspected double effects (their excess, see
-- above), already compensated, and in compensation requests awaiting a
-- second operator. `since`: unknown effects created, doubles with a success,
-- compensations settled and requests made since then; null: all.
create or replace function ledger.exposure_at(at_time timestamptz, since timestamptz)
returns table (
    currency text,
    unknown_effects bigint, unknown_minor bigint,
    suspected_effects bigint, suspected_excess_minor bigint,
    compensated_effects bigint, compensated_minor bigint,
    awaiting_approval bigint, awaiting_approval_minor bigint)
language sql stable as $$
    with items as (
        select e.currency, 'unknown' as kind, count(*) as n, sum(e.amount_minor) as minor
          from ledger.effects_at(exposure_at.at_time) e
         where e.state = 'unknown' and e.currency is not null
           and (exposure_at.since is null or e.created_at >= exposure_at.since)
         group by e.currency
        union all
        select g.currency, 'suspected', sum(g.n), sum(g.excess)
          from (select s.currency, count(*) as n, max(s.excess_minor) as excess
                  from ledger.suspected_double_effects_at(exposure_at.at_time, exposure_at.since) s
                 where s.currency is not null
                 group by s.target, s.action, s.currency) g
         group by g.currency
        union all
        select e.currency, 'compensated', count(*), sum(e.amount_minor)
          from ledger.effects_at(exposure_at.at_time) e
         where e.state = 'compensated' and e.currency is not null
           and (exposure_at.since is null or e.settled_at >= exposure_at.since)
         group by e.currency
        union all
        select r.currency, 'awaiting_approval', count(*), sum(r.amount_minor)
          from ledger.compensation_requests_at(exposure_at.at_time) r
         where r.state = 'awaiting_approval' and r.currency is not null
           and (exposure_at.since is null or r.created_at >= exposure_at.since)
         group by r.currency
    )
    select i.currency,
           coalesce(sum(i.n) filter (where i.kind = 'unknown'), 0)::bigint,
           coalesce(sum(i.minor) filter (where i.kind = 'unknown'), 0)::bigint,
           coalesce(sum(i.n) filter (where i.kind = 'suspected'), 0)::bigint,
           coalesce(sum(i.minor) filter (where i.kind = 'suspected'), 0)::bigint,
           coalesce(sum(i.n) filter (where i.kind = 'compensated'), 0)::bigint,
           coalesce(sum(i.minor) filter (where i.kind = 'compensated'), 0)::bigint,
           coalesce(sum(i.n) filter (where i.kind = 'awaiting_approval'), 0)::bigint,
           coalesce(sum(i.minor) filter (where i.kind = 'awaiting_approval'), 0)::bigint
      from items i
     group by i.currency
     order by i.currency
$$;

revoke all on function ledger.exposure_at(timestamp with time zone,timestamp with time zone) from public;
grant execute on function ledger.exposure_at(timestamp with time zone,timestamp with time zone) to effect_operator, effect_readonly;
