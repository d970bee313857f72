-- Drops the tombstones of keys pruned more than `older_than` ago: after
-- this, such a key could proceed as new. The ledger refuses an age under
-- 30 days, and `effectwatch prune` defaults to keeping them for 400.
-- Audited with the count. Owner only.
create or replace function ledger.prune_tombstones(older_than interval, operator text, reason text)
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

revoke all on function ledger.prune_tombstones(interval,text,text) from public;
