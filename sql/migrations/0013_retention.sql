-- Retention ------------------------------------------------------------------
--
-- ledger.prune_settled removes old settled effects with their attempts,
-- state history, versions, reconciliations and holds. What it never removes:
--   * effects that are not settled, or settled in a way that still needs a
--     person: pending, held, unknown, compensated, failed and retryable,
--     flagged (attention, late result);
--   * effects named by the audit trail: an audit entry that names an
--     effect is never dropped, and nulling its effect_id would both be an
--     UPDATE of an append-only table and break the hash chain (effect_id is
--     hashed). So an effect any operator acted on stays for good;
--   * effects with an escalation (in any state: escalations keep the
--     delivery record, and every escalation is audited anyway);
--   * effects linked to another: a compensation or a compensated original,
--     either side of a hold, the subject of a compensation request;
--   * members of a suspected double effect (ledger.suspected_double_effects):
--     the evidence finance needs.
-- Then it drops the months of history that ended before the cutoff
-- (sql/0018_history_partitions.sql): the rows of the effects that stay are
-- carried into the kept partitions first, and the audit entries naming no
-- effect go under a signed checkpoint. It appends one audit entry of its
-- own with the counts. Each pruned key leaves a tombstone (ledger.key_tombstones) that
-- begin_effect answers from, so the key can never proceed again;
-- tombstones have their own, much longer retention (prune_tombstones).
--
-- The bypass of the append-only triggers on attempts and effect_versions:
-- those triggers now let a DELETE through only when (1) the transaction-
-- local setting ledger.prune_xact equals the id of the current transaction,
-- which prune_settled sets just before its deletes and clears right after,
-- and (2) the row's effect still exists and is settled (succeeded, failed or
-- cancelled): prune_settled deletes children before their effect. UPDATE
-- and TRUNCATE stay refused. Why this is safe: only a role holding DELETE on
-- those tables can try at all, which is the owner (agents, operators and
-- read-only consoles hold none, and prune_settled is not granted to them);
-- a value set by hand in one transaction never matches another's id; and the
-- owner, who could forge it deliberately, could drop the trigger too: the
-- trigger guards against accidents, the function makes the sanctioned path
-- narrow and audited.

-- The cutoff of a prune of what settled more than `older_than` ago, or
-- the refusal every prune (and its dry run) gives an age it does not take.
create function ledger.prune_cutoff(older_than interval) returns timestamptz
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if older_than is null or older_than < interval '0' then
        raise exception 'ledger: prune needs an age of at least 0 (got %)', older_than
            using errcode = 'invalid_parameter_value';
    end if;
    return now() - older_than;
end
$$;

-- The same for the tombstones of pruned keys: never younger than 30 days.
create function ledger.tombstone_cutoff(older_than interval) returns timestamptz
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if older_than is null or older_than < interval '30 days' then
        raise exception 'ledger: tombstones are kept at least 30 days (got %): a replay after that could proceed again',
            older_than
            using errcode = 'invalid_parameter_value';
    end if;
    return now() - older_than;
end
$$;

-- Why an old settled effect must stay; null: it may be pruned.
create function ledger.prune_review(cutoff timestamptz)
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

-- Locks the effects settled before the cutoff (so no operator action or
-- escalation can name one while a prune runs) and returns those that may be
-- pruned, each as one JSON record of everything prune_settled would delete:
-- what `effectwatch prune --export` writes before deleting.
create function ledger.prune_export(older_than interval)
returns table (effect_id bigint, data jsonb)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    cutoff timestamptz;
begin
    perform ledger.forget_caller_settings();
    cutoff := ledger.prune_cutoff(older_than);
    perform pg_advisory_xact_lock(hashtextextended('ledger.prune', 0));
    perform 1 from ledger.effects e
      where e.settled_at is not null and e.settled_at < cutoff
      order by e.id
        for update;
    return query
    select e.id,
           jsonb_build_object(
               'effect', to_jsonb(e),
               'attempts', coalesce((select jsonb_agg(to_jsonb(a) order by a.id)
                                       from ledger.attempts a where a.effect_id = e.id), '[]'),
               'events', coalesce((select jsonb_agg(to_jsonb(ev) order by ev.id)
                                     from ledger.effect_events ev where ev.effect_id = e.id), '[]'),
               'versions', coalesce((select jsonb_agg(to_jsonb(v) order by v.version)
                                       from ledger.effect_history v where v.effect_id = e.id), '[]'),
               'reconciliations', coalesce((select jsonb_agg(to_jsonb(r) order by r.id)
                                              from ledger.reconciliations r where r.effect_id = e.id), '[]'),
               'holds', coalesce((select jsonb_agg(to_jsonb(h) order by h.id)
                                    from ledger.holds h where h.effect_id = e.id or h.holder_id = e.id), '[]'))
      from ledger.prune_review(cutoff) v
      join ledger.effects e on e.id = v.effect_id
     where v.kept_because is null
     order by e.id;
end
$$;

-- Deletes the effects settled more than `older_than` ago that nothing
-- protects (see above) — only those in only_ids when given, which is how
-- the CLI deletes exactly what it exported — and appends one audit entry
-- with the counts. Owner only.
create function ledger.prune_settled(
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

-- Drops the tombstones of keys pruned more than `older_than` ago: after
-- this, such a key could proceed as new. The ledger refuses an age under
-- 30 days, and `effectwatch prune` defaults to keeping them for 400.
-- Audited with the count. Owner only.
create function ledger.prune_tombstones(older_than interval, operator text, reason text)
returns table (tombstones bigint, audit_seq bigint)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    n bigint;
    seq bigint;
begin
    perform ledger.forget_caller_settings();
    perform ledger.require_who_and_why(prune_tombstones.operator, prune_tombstones.reason,
                                       'to drop tombstones');
    perform ledger.tombstone_cutoff(prune_tombstones.older_than);
    delete from ledger.key_tombstones t where t.pruned_at < now() - prune_tombstones.older_than;
    get diagnostics n = row_count;
    seq := ledger.audit(prune_tombstones.operator, 'prune_tombstones', null::ledger.effects,
                        prune_tombstones.reason,
                        jsonb_build_object('older_than', prune_tombstones.older_than::text),
                        jsonb_build_object('tombstones', n));
    return query select n, seq;
end
$$;

-- What `prune` would do now, refusing what it would refuse: the effects
-- that would go and why the others stay; the months of history that would
-- be dropped whole, or none, with the end of the months that would stay,
-- when dropping them needs a signed checkpoint and `signed` says there is
-- no key to sign it; and, given a tombstone age, the tombstones that would
-- go. Changes nothing. Owner only, as the prune is.
create function ledger.prune_plan(older_than interval, signed boolean,
                                  tombstones_older_than interval default null)
returns table (prunable bigint, kept jsonb, months text[], unsigned_through timestamptz,
               tombstones bigint)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    limit_at timestamptz := ledger.prune_cutoff(prune_plan.older_than);
    tomb_at  timestamptz;
    due      record;
begin
    if prune_plan.tombstones_older_than is not null then
        tomb_at := ledger.tombstone_cutoff(prune_plan.tombstones_older_than);
    end if;
    select * into due from ledger.audit_checkpoint_due(limit_at);
    return query
    select (select count(*) from ledger.prune_review(limit_at) v where v.kept_because is null),
           (select coalesce(jsonb_object_agg(g.kept_because, g.n), '{}')
              from (select v.kept_because, count(*) as n from ledger.prune_review(limit_at) v
                     where v.kept_because is not null group by v.kept_because) g),
           case when due.seq is not null and not prune_plan.signed then '{}'::text[]
                else (select coalesce(array_agg(to_char(m, 'YYYY-MM') order by m), '{}')
                        from ledger.months_ended_by(limit_at) m) end,
           case when due.seq is not null and not prune_plan.signed then due.through end,
           case when tomb_at is not null then
               (select count(*) from ledger.key_tombstones t where t.pruned_at < tomb_at) end;
end
$$;
