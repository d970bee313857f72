-- The exact text a checkpoint signs.
create or replace function ledger.audit_checkpoint_message(
    seq bigint, hash text, through timestamptz, kept_entries bigint, kept_digest text
) returns text
language sql immutable as $$
    select format('effectwatch audit checkpoint v1 seq=%s hash=%s through=%s kept=%s kept_digest=%s',
                  seq, hash, (extract(epoch from through) * 1000000)::bigint, kept_entries, kept_digest)
$$;

revoke all on function ledger.audit_checkpoint_message(bigint,text,timestamp with time zone,bigint,text) from public;
grant execute on function ledger.audit_checkpoint_message(bigint,text,timestamp with time zone,bigint,text) to effect_operator, effect_readonly;
