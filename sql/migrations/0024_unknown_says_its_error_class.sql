-- The unknown pane's last error names the worker's error class.
--
-- A worker that records an unknown outcome by its class alone
-- (`complete_effect(outcome => 'unknown', error_class => 'timeout')`, as
-- the clients and the gateway do) leaves failure_reason empty: the pane
-- said `—` where the ledger knew `timeout`. The last error is now the
-- class, then the reason when there is one (`timeout: no answer in 10 s`;
-- a reason that already begins with its class is left as it is), live and
-- at any instant (error_class is a versioned column). Same
-- columns, same order: the view over it and every grant stay as they were.

create or replace function ledger.unknown_outcomes_at(at_time timestamptz)
returns table (
    op_key text, effect_id bigint, action text, target text, amount_minor bigint, currency text,
    provider text, requested_by text, unknown_since timestamptz, unknown_for interval,
    attempts bigint, last_error text, reconciliations bigint, last_finding text, findings text[],
    attention text, version bigint)
language sql stable as $$
    select e.op_key, e.id, e.action, e.target, e.amount_minor, e.currency, e.provider, e.requested_by,
           e.state_since, ledger.instant(at_time) - e.state_since,
           (select count(*) from ledger.attempts a
             where a.effect_id = e.id and a.at <= ledger.instant(at_time)),
           case when e.error_class is null then e.failure_reason
                when e.failure_reason is null then e.error_class
                when starts_with(e.failure_reason, e.error_class) then e.failure_reason
                else e.error_class || ': ' || e.failure_reason end,
           coalesce(recon.count, 0),
           recon.last_finding,
           coalesce(recon.findings, '{}'),
           e.attention,
           e.version
      from ledger.effects_at(at_time) e
      left join lateral (
            select count(*) as count,
                   (array_agg(r.finding order by r.at desc, r.id desc))[1] as last_finding,
                   array_agg(r.finding order by r.at, r.id) as findings
              from ledger.reconciliations r
             where r.effect_id = e.id and r.at <= ledger.instant(at_time)) recon on true
     where e.state = 'unknown'
$$;
