-- Appends one audit entry; called by every operator function in the same
-- transaction as the change it records.
create or replace function ledger.audit(
    operator text, action text, effect ledger.effects, reason text, before jsonb, after jsonb
) returns bigint
language plpgsql as $$
declare
    entry_seq bigint;
begin
    insert into ledger.audit_log (seq, operator, db_role, action, effect_id, op_key, reason,
                                  before, after, prev_hash, hash)
    values (0, audit.operator, session_user::text, audit.action, (audit.effect).id, (audit.effect).op_key,
            audit.reason, audit.before, audit.after, '', '')
    returning seq into entry_seq;
    return entry_seq;
end
$$;

revoke all on function ledger.audit(text,text,ledger.effects,text,jsonb,jsonb) from public;
