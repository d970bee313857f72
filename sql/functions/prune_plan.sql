-- What `prune` would do now, refusing what it would refuse: the effects
-- that would go and why the others stay; the months of history that would
-- be dropped whole, or none, with the end of the months that would stay,
-- when dropping them needs a signed checkpoint and `signed` says there is
-- no key to sign it; and, given a tombstone age, the tombstones that would
-- go. Changes nothing. Owner only, as the prune is.
create or replace function ledger.prune_plan(older_than interval, signed boolean,
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

revoke all on function ledger.prune_plan(interval,boolean,interval) from public;
