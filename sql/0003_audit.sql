-- The audit trail: append-only, hash-chained. The chain is computed in a
-- trigger under a transaction-scoped advisory lock, so concurrent operators
-- still produce one unbroken sequence; seq (not an identity) is assigned under
-- that lock so the chain order is the commit order of the lock holders.

create function ledger.audit_entry_hash(
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

create function ledger.audit_chain() returns trigger
language plpgsql as $$
declare
    last_seq  bigint;
    last_hash text;
begin
    perform pg_advisory_xact_lock(hashtextextended('ledger.audit_log', 0));
    select a.seq, a.hash into last_seq, last_hash
      from ledger.audit_log a order by a.seq desc limit 1;
    new.seq := coalesce(last_seq, 0) + 1;
    new.prev_hash := coalesce(last_hash, repeat('0', 64));
    new.at := clock_timestamp();
    new.db_role := session_user::text;
    new.hash := ledger.audit_entry_hash(new.prev_hash, new.seq, new.at, new.operator, new.db_role,
                                        new.action, new.effect_id, new.op_key, new.reason,
                                        new.before, new.after);
    return new;
end
$$;

create trigger audit_chain
    before insert on ledger.audit_log
    for each row execute function ledger.audit_chain();
create trigger audit_append_only
    before update or delete on ledger.audit_log
    for each row execute function ledger.reject_change();
create trigger audit_no_truncate
    before truncate on ledger.audit_log
    for each statement execute function ledger.reject_change();
-- Fire in every session mode (see 0002).
alter table ledger.audit_log enable always trigger audit_chain;
alter table ledger.audit_log enable always trigger audit_append_only;
alter table ledger.audit_log enable always trigger audit_no_truncate;

-- Every audited change names who made it and why: refused before anything
-- is written when either is blank. `what` ends the message ("to prune").
create function ledger.require_who_and_why(who text, why text, what text) returns void
language plpgsql immutable as $$
begin
    if coalesce(btrim(who), '') = '' then
        raise exception 'ledger: an operator name is required' using errcode = 'invalid_parameter_value';
    end if;
    if coalesce(btrim(why), '') = '' then
        raise exception 'ledger: a reason is required %', what using errcode = 'invalid_parameter_value';
    end if;
end
$$;

-- Appends one audit entry; called by every operator function in the same
-- transaction as the change it records.
create function ledger.audit(
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

-- Walks the whole chain in order. Returns how many entries were checked and,
-- if the chain is broken, the first entry that does not verify and why.
create function ledger.verify_audit_chain(
    out checked bigint, out first_broken_seq bigint, out problem text
)
language plpgsql stable as $$
declare
    entry     record;
    expected_prev text := repeat('0', 64);
    expected_seq  bigint := 1;
begin
    checked := 0;
    for entry in select * from ledger.audit_log order by seq loop
        if entry.seq <> expected_seq then
            first_broken_seq := entry.seq;
            problem := format('entry %s follows %s: entries are missing', entry.seq, expected_seq - 1);
            return;
        end if;
        if entry.prev_hash <> expected_prev then
            first_broken_seq := entry.seq;
            problem := format('entry %s does not point at the hash of entry %s', entry.seq, entry.seq - 1);
            return;
        end if;
        if entry.hash <> ledger.audit_entry_hash(entry.prev_hash, entry.seq, entry.at, entry.operator,
                                                 entry.db_role, entry.action, entry.effect_id,
                                                 entry.op_key, entry.reason, entry.before, entry.after) then
            first_broken_seq := entry.seq;
            problem := format('entry %s was altered after it was written', entry.seq);
            return;
        end if;
        checked := checked + 1;
        expected_prev := entry.hash;
        expected_seq := entry.seq + 1;
    end loop;
end
$$;
