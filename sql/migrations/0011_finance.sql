-- For finance: suspected double effects and money at risk per currency.
-- Amounts stay integer minor units and are never summed across currencies.

-- The amount an approval allows, as the writer recorded it in the effect's
-- params: "approved_amount_minor", an integer in the effect's currency.
-- Anything else (absent, a string, a fraction) means "not stated".
create function ledger.approved_amount(params jsonb) returns bigint
language sql immutable as $$
    select case when jsonb_typeof(params -> 'approved_amount_minor') = 'number'
                 and (params ->> 'approved_amount_minor') ~ '^-?[0-9]{1,18}$'
                then (params ->> 'approved_amount_minor')::bigint end
$$;

-- How the compensation of an effect stands: 'awaiting_approval' (a request
-- waits for a second operator), the state of its latest compensation effect
-- ('pending', 'dispatched', 'held', 'unknown', 'succeeded', 'failed',
-- 'cancelled'), 'rejected' (the last request was turned down) or 'none'.
create function ledger.compensation_status_at(effect_id bigint, at_time timestamptz,
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

-- Suspected double effects: succeeded effects (compensations aside) on a
-- target that has
--   'repeated':           more than one succeeded effect of the same action;
--   'over_approved':      a succeeded total, in one currency, above what the
--                         approvals on record allow (ledger.approved_amount;
--                         per approval_ref the latest version counts, effects
--                         without approval_ref count as their own approval);
--   'provider_duplicate': a reconciliation found the effect twice at the
--                         provider (attention = 'duplicate').
-- One row per effect, with its group's figures in its currency:
--   total_minor:    the succeeded total of the group in that currency;
--   approved_minor: what the approvals allow, null when none says;
--   excess_minor:   the money moved beyond what one effect or the approvals
--                   explain: total - coalesce(approved, earliest effect's
--                   amount), at least 0, plus the amount of each effect the
--                   provider holds twice.
-- Totals are never summed across currencies. A compensated effect is no
-- longer succeeded, so a double that was reversed leaves this list (and
-- shows under "compensated" in ledger.exposure). `since` keeps the targets
-- with a success since then; null: all.
create function ledger.suspected_double_effects_at(at_time timestamptz, since timestamptz)
returns table (
    target text, action text, op_key text, effect_id bigint,
    amount_minor bigint, currency text, provider text, external_ref text,
    approval_ref text, approval_version integer, requested_by text,
    succeeded_at timestamptz, reasons text[], succeeded_effects bigint,
    total_minor bigint, approved_minor bigint, excess_minor bigint,
    compensation text, compensation_key text, compensation_under_way boolean,
    version bigint)
language sql stable as $$
    -- Each group is read by its own index probes (a lateral call per group,
    -- fenced so the planner cannot flatten it into a scan of every effect):
    -- the cost follows the candidate groups, not the ledger.
    with candidates as (
        -- A group of one effect, within its approval and held once, cannot
        -- be a double: only groups with a double_candidate (or a provider
        -- duplicate) are read, by their partial index.
        select distinct e.target, e.action
          from ledger.effects_at(suspected_double_effects_at.at_time) e
         where e.double_candidate or e.attention = 'duplicate'
    ),
    touched as (
        select c.target, c.action
          from candidates c
         cross join lateral (
                select 1 from ledger.effects_at(suspected_double_effects_at.at_time) e
                 where e.target = c.target and e.action = c.action
                   and e.state = 'succeeded' and e.compensates is null
                   and (suspected_double_effects_at.since is null
                        or (e.updated_at >= suspected_double_effects_at.since
                            and e.settled_at >= suspected_double_effects_at.since))
                 limit 1) succeeded_since
    ),
    group_effects as (
        select e.*
          from touched t
         cross join lateral (
                select e.* from ledger.effects_at(suspected_double_effects_at.at_time) e
                 where e.target = t.target and e.action = t.action and e.compensates is null
                offset 0) e
    ),
    members as (
        select g.* from group_effects g where g.state = 'succeeded'
    ),
    counts as (
        select m.target, m.action, count(*) as n from members m group by m.target, m.action
    ),
    approvals as (
        select a.target, a.action, a.currency, sum(a.approved)::bigint as approved
          from (select distinct on (e.target, e.action, e.currency, coalesce(e.approval_ref, e.op_key))
                       e.target, e.action, e.currency, ledger.approved_amount(e.params) as approved
                  from group_effects e
                 where e.currency is not null
                   and ledger.approved_amount(e.params) is not null
                 order by e.target, e.action, e.currency, coalesce(e.approval_ref, e.op_key),
                          e.approval_version desc nulls last, e.id desc) a
         group by a.target, a.action, a.currency
    ),
    totals as (
        select m.target, m.action, m.currency,
               sum(m.amount_minor)::bigint as total,
               (array_agg(m.amount_minor order by m.settled_at, m.id))[1] as earliest,
               count(*) as moved,
               coalesce(sum(m.amount_minor) filter (where m.attention = 'duplicate'), 0)::bigint as twice
          from members m
         where m.currency is not null
         group by m.target, m.action, m.currency
    ),
    figured as (
        select m.*, c.n, t.total, ap.approved,
               greatest(t.total - coalesce(ap.approved, t.earliest), 0) + t.twice as excess,
               array_remove(array[
                   -- Two effects that moved no money (two messages, two
                   -- lookups) are not a double effect by count alone.
                   case when t.moved > 1 then 'repeated' end,
                   case when t.total > ap.approved then 'over_approved' end,
                   case when m.attention = 'duplicate' then 'provider_duplicate' end], null) as reasons
          from members m
          join counts c on c.target = m.target and c.action = m.action
          left join totals t on t.target = m.target and t.action = m.action and t.currency = m.currency
          left join approvals ap on ap.target = m.target and ap.action = m.action and ap.currency = m.currency
    )
    select f.target, f.action, f.op_key, f.id, f.amount_minor, f.currency, f.provider, f.external_ref,
           f.approval_ref, f.approval_version, f.requested_by, f.settled_at, f.reasons, f.n,
           f.total, f.approved, f.excess,
           cs.status, cs.compensation_key,
           cs.status in ('awaiting_approval', 'pending', 'dispatched', 'held', 'unknown'),
           f.version
      from figured f
     cross join lateral ledger.compensation_status_at(f.id, suspected_double_effects_at.at_time) cs
     where cardinality(f.reasons) > 0
       -- A group whose approvals cover all it paid is explained, not suspect;
       -- what moved no money has no excess and stays for its reason.
       and (f.excess is null or f.excess > 0)
     -- The largest excess first within a currency; minor units are never
     -- compared across currencies.
     order by f.currency nulls last, f.excess desc nulls last, f.target, f.action,
              f.settled_at, f.id
$$;

create view ledger.suspected_double_effects as
select * from ledger.suspected_double_effects_at(null, null);

-- Money at risk per currency (effects without an amount are not money):
-- in unknown effects, in suspected double effects (their excess, see
-- above), already compensated, and in compensation requests awaiting a
-- second operator. `since`: unknown effects created, doubles with a success,
-- compensations settled and requests made since then; null: all.
create function ledger.exposure_at(at_time timestamptz, since timestamptz)
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

create view ledger.exposure as
select * from ledger.exposure_at(null, null);
