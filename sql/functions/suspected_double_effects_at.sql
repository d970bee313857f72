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
create or replace function ledger.suspected_double_effects_at(at_time timestamptz, since timestamptz)
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

revoke all on function ledger.suspected_double_effects_at(timestamp with time zone,timestamp with time zone) from public;
grant execute on function ledger.suspected_double_effects_at(timestamp with time zone,timestamp with time zone) to effect_operator, effect_readonly;
