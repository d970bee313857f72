create or replace function ledger.audit_entry_hash(
    prev_hash text, seq bigint, at timestamptz, operator text, db_role text, action text,
    effect_id bigint, op_key text, reason text, before jsonb, after jsonb
) returns text
language sql immutable as $$
    -- Time as integer microseconds since the epoch: independent of the
    -- session's TimeZone and DateStyle, so any client verifies the same bytes.
    select encode(sha256(convert_to(
        prev_hash || jsonb_build_array(
            seq, (extract(epoch from at) * 1000000)::bigint, operator, db_role, action,
            effect_id, op_key, reason, before, after)::text,
        'UTF8')), 'hex')
$$;

revoke all on function ledger.audit_entry_hash(text,bigint,timestamp with time zone,text,text,text,bigint,text,text,jsonb,jsonb) from public;
grant execute on function ledger.audit_entry_hash(text,bigint,timestamp with time zone,text,text,text,bigint,text,text,jsonb,jsonb) to effect_operator, effect_readonly;
