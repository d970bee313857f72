-- The checkpoint that dropping the months ending by limit_at needs, with
-- the message to sign; no row when no audit entry would go (each month's
-- entries that name an effect are kept).
create or replace function ledger.audit_checkpoint_due(limit_at timestamptz)
returns table (seq bigint, hash text, through timestamptz, kept_entries bigint, kept_digest text,
               message text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    boundary timestamptz := ledger.history_drop_boundary(limit_at);
    head     record;
    kept     record;
begin
    if boundary is null or not exists (
        select 1 from ledger.audit_log a
         where a.at < boundary and a.effect_id is null
           and a.tableoid <> 'ledger.audit_log_kept'::regclass) then
        return;
    end if;
    select a.seq, a.hash into head from ledger.audit_log a where a.at < boundary order by a.seq desc limit 1;
    select * into kept from ledger.audit_kept_digest(head.seq, boundary);
    return query select head.seq, head.hash, boundary, kept.entries, kept.digest,
                        ledger.audit_checkpoint_message(head.seq, head.hash, boundary, kept.entries, kept.digest);
end
$$;

revoke all on function ledger.audit_checkpoint_due(timestamp with time zone) from public;
