-- Whether an entry's hash is the hash of what it says (and of the hash it
-- points at).
create or replace function ledger.audit_entry_intact(entry ledger.audit_log) returns boolean
language sql immutable as $$
    select entry.hash = ledger.audit_entry_hash(entry.prev_hash, entry.seq, entry.at, entry.operator,
                                                entry.db_role, entry.action, entry.effect_id,
                                                entry.op_key, entry.reason, entry.before, entry.after)
$$;

revoke all on function ledger.audit_entry_intact(ledger.audit_log) from public;
grant execute on function ledger.audit_entry_intact(ledger.audit_log) to effect_operator, effect_readonly;
