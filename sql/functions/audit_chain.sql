create or replace function ledger.audit_chain() returns trigger
language plpgsql as $$
declare
    head ledger.audit_head;
begin
    -- An entry carried into another partition keeps its place in the chain.
    -- Only such an entry: one that already has its place (ledger.audit writes
    -- seq 0) is chained whatever the transaction is doing besides.
    if new.seq > 0 and ledger.moving_history() then
        return new;
    end if;
    -- Retention takes this lock too, to wait for entries being written.
    perform pg_advisory_xact_lock(hashtextextended('ledger.audit_log', 0));
    select * into head from ledger.audit_head for update;
    new.seq := head.seq + 1;
    new.prev_hash := head.hash;
    new.at := clock_timestamp();
    new.db_role := session_user::text;
    new.hash := ledger.audit_entry_hash(new.prev_hash, new.seq, new.at, new.operator, new.db_role,
                                        new.action, new.effect_id, new.op_key, new.reason,
                                        new.before, new.after);
    update ledger.audit_head set seq = new.seq, hash = new.hash, entries = entries + 1;
    return new;
end
$$;

revoke all on function ledger.audit_chain() from public;
