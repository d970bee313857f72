-- The digest of the entries up to `through_seq` that are in the trail, or,
-- given dropping_before, that will be once the months before it are
-- dropped (their entries naming no effect go): what a checkpoint vouches
-- was kept.
create or replace function ledger.audit_kept_digest(
    through_seq bigint, dropping_before timestamptz default null, out entries bigint, out digest text
)
language sql stable as $$
    select count(*), encode(sha256(convert_to(coalesce(string_agg(a.hash, ',' order by a.seq), ''), 'UTF8')), 'hex')
      from ledger.audit_log a
     where a.seq <= through_seq
       and not (a.at < dropping_before and a.effect_id is null
                and a.tableoid <> 'ledger.audit_log_kept'::regclass)
$$;

revoke all on function ledger.audit_kept_digest(bigint,timestamp with time zone) from public;
grant execute on function ledger.audit_kept_digest(bigint,timestamp with time zone) to effect_operator, effect_readonly;
