-- Deletes the effects settled more than `older_than` ago that nothing
-- protects (see above) — only those in only_ids when given, which is how
-- the CLI deletes exactly what it exported — and appends one audit entry
-- with the counts. Owner only.
create or replace function ledger.prune_settled(
    older_than interval, operator text, reason text, only_ids bigint[] default null,
    drop_months boolean default true, checkpoint_message text default null,
    checkpoint_signature text default null, checkpoint_key text default null
) returns table (effects bigint, attempts bigint, events bigint, reconciliations bigint, holds bigint,
                 tombstones bigint, kept jsonb, cutoff timestamptz, history jsonb, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    limit_at     timestamptz;
    doomed       bigint[];
    kept_counts  jsonb;
    n_effects    bigint;
    n_attempts   bigint;
    n_events     bigint;
    n_recons     bigint;
    n_holds      bigint;
    n_tombstones bigint;
    boundary     timestamptz;
    months       jsonb;
    seq          bigint;
begin
    perform ledger.forget_caller_settings();
    perform ledger.require_who_and_why(prune_settled.operator, prune_settled.reason, 'to prune');
    limit_at := ledger.prune_cutoff(prune_settled.older_than);
    -- Without months to drop (or told not to), history goes row by row.
    boundary := case when prune_settled.drop_months then ledger.history_drop_boundary(limit_at) end;
    -- One prune at a time; lock the candidates before judging them, so an
    -- audit entry or escalation naming one waits until we are done.
    perform pg_advisory_xact_lock(hashtextextended('ledger.prune', 0));
    perform 1 from ledger.effects e
      where e.settled_at is not null and e.settled_at < limit_at
      order by e.id
        for update;

    with review as (select * from ledger.prune_review(limit_at))
    select (select coalesce(array_agg(v.effect_id order by v.effect_id), '{}') from review v
             where v.kept_because is null
               and (prune_settled.only_ids is null or v.effect_id = any (prune_settled.only_ids))),
           (select coalesce(jsonb_object_agg(g.kept_because, g.n), '{}')
              from (select v.kept_because, count(*) as n from review v
                     where v.kept_because is not null group by v.kept_because) g)
      into doomed, kept_counts;

    -- Counted before the months go: what the pruned effects had.
    select count(*) into n_attempts from ledger.attempts a where a.effect_id = any (doomed);
    select count(*) into n_events from ledger.effect_events ev where ev.effect_id = any (doomed);
    select count(*) into n_recons from ledger.reconciliations r where r.effect_id = any (doomed);
    -- Their history in months that stay, and in the kept partitions (whose
    -- rows may be older than the boundary), goes row by row; the months that
    -- end before the boundary go whole below.
    boundary := coalesce(boundary, '-infinity');
    perform set_config('ledger.prune_xact', pg_current_xact_id()::text, true);
    -- (A kept row older than the boundary is not in the first statement's
    -- months; an OR of the two would probe every month for every effect.)
    delete from ledger.attempts a where a.effect_id = any (doomed) and a.at >= boundary;
    delete from ledger.attempts_kept a where a.effect_id = any (doomed);
    delete from ledger.effect_versions v where v.effect_id = any (doomed) and v.at >= boundary;
    delete from ledger.effect_versions_kept v where v.effect_id = any (doomed);
    delete from ledger.reconciliations r where r.effect_id = any (doomed) and r.at >= boundary;
    delete from ledger.reconciliations_kept r where r.effect_id = any (doomed);
    delete from ledger.holds h where h.effect_id = any (doomed) or h.holder_id = any (doomed);
    get diagnostics n_holds = row_count;
    insert into ledger.key_tombstones (op_key, effect_id, material_hash, final_state, external_ref,
                                       result, settled_at)
    select e.op_key, e.id,
           ledger.material_hash(e.params_hash, e.action, e.target, e.amount_minor, e.currency, e.provider,
                                e.during),
           e.state, e.external_ref, e.result, e.settled_at
      from ledger.effects e
     where e.id = any (doomed) and e.state in ('succeeded', 'failed', 'cancelled')
    on conflict (op_key) do nothing;
    get diagnostics n_tombstones = row_count;
    delete from ledger.effects e where e.id = any (doomed) and e.state in ('succeeded', 'failed', 'cancelled');
    get diagnostics n_effects = row_count;
    perform set_config('ledger.prune_xact', '', true);
    months := ledger.drop_history_months(nullif(boundary, '-infinity'), prune_settled.operator,
                                         prune_settled.checkpoint_message, prune_settled.checkpoint_signature,
                                         prune_settled.checkpoint_key);

    seq := ledger.audit(prune_settled.operator, 'prune', null::ledger.effects, prune_settled.reason,
                        jsonb_build_object('older_than', prune_settled.older_than::text, 'cutoff', limit_at),
                        jsonb_build_object('effects', n_effects, 'attempts', n_attempts, 'events', n_events,
                                           'reconciliations', n_recons, 'holds', n_holds,
                                           'tombstones', n_tombstones, 'kept', kept_counts,
                                           'history', months));
    return query select n_effects, n_attempts, n_events, n_recons, n_holds, n_tombstones, kept_counts,
                        limit_at, months, seq;
end
$$;

revoke all on function ledger.prune_settled(interval,text,text,bigint[],boolean,text,text,text) from public;
