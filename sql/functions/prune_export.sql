-- Locks the effects settled before the cutoff (so no operator action or
-- escalation can name one while a prune runs) and returns those that may be
-- pruned, each as one JSON record of everything prune_settled would delete:
-- what `effectwatch prune --export` writes before deleting.
create or replace function ledger.prune_export(older_than interval)
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

revoke all on function ledger.prune_export(interval) from public;
