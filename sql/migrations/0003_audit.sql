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

-- The head of the chain: one row, moved forward by every entry under its
-- row lock. It makes seq unique without a key on the partitioned table (a
-- writer whose snapshot missed a newer head fails to serialize instead of
-- forking the chain), survives retention dropping the entries it names,
-- and is read in one lookup. It also keeps how many entries the log holds,
-- so the Audit tab's count costs one lookup however long the history grows
-- (retention subtracts the entries a dropped month takes with it).
create table ledger.audit_head (
    single  boolean primary key default true check (single),
    seq     bigint not null,
    hash    text not null,
    entries bigint not null default 0 check (entries >= 0)
);
insert into ledger.audit_head (seq, hash) values (0, repeat('0', 64));

create trigger audit_head_no_delete
    before delete or truncate on ledger.audit_head
    for each statement execute function ledger.reject_change();
alter table ledger.audit_head enable always trigger audit_head_no_delete;

create function ledger.audit_chain() returns trigger
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

create trigger audit_chain
    before insert on ledger.audit_log
    for each row execute function ledger.audit_chain();
create function ledger.audit_append_only() returns trigger
language plpgsql as $$
begin
    if tg_op = 'DELETE' and ledger.moving_history() then
        return old;
    end if;
    raise exception 'ledger: ledger.audit_log is append-only (% refused)', tg_op
        using errcode = 'insufficient_privilege';
end
$$;

create trigger audit_append_only
    before update or delete on ledger.audit_log
    for each row execute function ledger.audit_append_only();
create trigger audit_no_truncate
    before truncate on ledger.audit_log
    for each statement execute function ledger.reject_change();
-- Fire in every session mode (see 0002).
alter table ledger.audit_log enable always trigger audit_chain;
alter table ledger.audit_log enable always trigger audit_append_only;
alter table ledger.audit_log enable always trigger audit_no_truncate;

-- The settings the ledger's functions leave for its triggers (who acts and
-- why, and the markers of retention and of history moving between
-- partitions) are the ledger's word only if the ledger set them: every
-- SECURITY DEFINER function forgets whatever its caller set before it does
-- anything, so a login cannot write a reason of its choosing into history
-- or pass for retention. One SQL expression, inlined where it is called: a
-- plain expression on the writer's path, no query of its own. A function
-- with SET clauses for them would do the same on exit too, but PostgreSQL
-- before 16 lets only a superuser attach a custom setting to a function.
create function ledger.forget_caller_settings() returns text
language sql volatile as $$
    select set_config('ledger.actor', '', true) || set_config('ledger.reason', '', true)
        || set_config('ledger.history_move_xact', '', true) || set_config('ledger.prune_xact', '', true)
$$;

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

-- Checkpoints of the chain, made when retention drops months of audit
-- history (sql/0018_history_partitions.sql): the head of the chain before
-- the dropped months (seq, hash), and a digest of the entries from before
-- it that were kept because they name an effect still in the ledger. The
-- message is signed with an Ed25519 key the database never sees, so a
-- checkpoint cannot be forged by whoever can write here; `effectwatch audit
-- verify` checks the signature against the key it trusts.
create table ledger.audit_checkpoints (
    seq          bigint primary key,
    hash         text not null,
    -- History before this instant was dropped.
    through      timestamptz not null,
    kept_entries bigint not null,
    kept_digest  text not null,
    message      text not null,
    -- Base64: the signature of message, and the raw 32-byte public key.
    signature    text not null,
    public_key   text not null,
    made_by      text not null,
    made_at      timestamptz not null default now()
);

create trigger audit_checkpoints_append_only
    before update or delete on ledger.audit_checkpoints
    for each row execute function ledger.reject_change();
create trigger audit_checkpoints_no_truncate
    before truncate on ledger.audit_checkpoints
    for each statement execute function ledger.reject_change();
alter table ledger.audit_checkpoints enable always trigger audit_checkpoints_append_only;
alter table ledger.audit_checkpoints enable always trigger audit_checkpoints_no_truncate;

-- The digest of the entries up to `through_seq` that are in the trail, or,
-- given dropping_before, that will be once the months before it are
-- dropped (their entries naming no effect go): what a checkpoint vouches
-- was kept.
create function ledger.audit_kept_digest(
    through_seq bigint, dropping_before timestamptz default null, out entries bigint, out digest text
)
language sql stable as $$
    select count(*), encode(sha256(convert_to(coalesce(string_agg(a.hash, ',' order by a.seq), ''), 'UTF8')), 'hex')
      from ledger.audit_log a
     where a.seq <= through_seq
       and not (a.at < dropping_before and a.effect_id is null
                and a.tableoid <> 'ledger.audit_log_kept'::regclass)
$$;

-- The exact text a checkpoint signs.
create function ledger.audit_checkpoint_message(
    seq bigint, hash text, through timestamptz, kept_entries bigint, kept_digest text
) returns text
language sql immutable as $$
    select format('effectwatch audit checkpoint v1 seq=%s hash=%s through=%s kept=%s kept_digest=%s',
                  seq, hash, (extract(epoch from through) * 1000000)::bigint, kept_entries, kept_digest)
$$;

-- Whether an entry's hash is the hash of what it says (and of the hash it
-- points at).
create function ledger.audit_entry_intact(entry ledger.audit_log) returns boolean
language sql immutable as $$
    select entry.hash = ledger.audit_entry_hash(entry.prev_hash, entry.seq, entry.at, entry.operator,
                                                entry.db_role, entry.action, entry.effect_id,
                                                entry.op_key, entry.reason, entry.before, entry.after)
$$;

-- Walks the chain in order, from the newest checkpoint when months of it
-- were dropped. Returns how many entries were checked, the checkpoint it
-- started from (null: the chain is whole), and, if the chain is broken, the
-- first entry that does not verify and why. Entries from before the
-- checkpoint that were kept are checked each on its own and against the
-- checkpoint's digest; the signature is checked by the client, which holds
-- the trusted key. The chain must end at ledger.audit_head, which every
-- entry moves and retention never drops: a chain that stops short of it
-- lost its newest entries. (Whoever can rewrite the head as well, the
-- owner, is caught by an anchor kept outside the ledger: effectwatch audit
-- anchor.)
create function ledger.verify_audit_chain(
    out checked bigint, out first_broken_seq bigint, out problem text, out checkpoint_seq bigint
)
language plpgsql stable as $$
declare
    entry     ledger.audit_log;
    head      ledger.audit_head;
    mark      ledger.audit_checkpoints;
    kept      record;
    expected_prev text := repeat('0', 64);
    expected_seq  bigint := 1;
begin
    checked := 0;
    select * into mark from ledger.audit_checkpoints c order by c.seq desc limit 1;
    if found then
        checkpoint_seq := mark.seq;
        if mark.message <> ledger.audit_checkpoint_message(mark.seq, mark.hash, mark.through,
                                                           mark.kept_entries, mark.kept_digest) then
            first_broken_seq := mark.seq;
            problem := format('the checkpoint at entry %s was altered after it was signed', mark.seq);
            return;
        end if;
        for entry in select * from ledger.audit_log a where a.seq <= mark.seq order by a.seq loop
            if not ledger.audit_entry_intact(entry) or (entry.seq = mark.seq and entry.hash <> mark.hash) then
                first_broken_seq := entry.seq;
                problem := format('entry %s was altered after it was written', entry.seq);
                return;
            end if;
            checked := checked + 1;
        end loop;
        select * into kept from ledger.audit_kept_digest(mark.seq);
        if kept.entries <> mark.kept_entries or kept.digest <> mark.kept_digest then
            first_broken_seq := mark.seq;
            problem := format('%s entries from before the checkpoint at entry %s were kept, %s remain: entries are missing',
                              mark.kept_entries, mark.seq, kept.entries);
            return;
        end if;
        expected_prev := mark.hash;
        expected_seq := mark.seq + 1;
    end if;
    for entry in select * from ledger.audit_log a where a.seq >= expected_seq order by a.seq loop
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
        if not ledger.audit_entry_intact(entry) then
            first_broken_seq := entry.seq;
            problem := format('entry %s was altered after it was written', entry.seq);
            return;
        end if;
        checked := checked + 1;
        expected_prev := entry.hash;
        expected_seq := entry.seq + 1;
    end loop;
    select * into head from ledger.audit_head;
    if head.seq > expected_seq - 1 then
        first_broken_seq := expected_seq;
        problem := format('entries %s to %s are missing: the chain ends at entry %s, its head at entry %s',
                          expected_seq, head.seq, expected_seq - 1, head.seq);
    elsif head.seq < expected_seq - 1 then
        first_broken_seq := head.seq + 1;
        problem := format('entries %s to %s were added without moving the head (entry %s)',
                          head.seq + 1, expected_seq - 1, head.seq);
    elsif head.hash <> expected_prev then
        first_broken_seq := head.seq;
        problem := format('entry %s is not the head the ledger recorded: the end of the chain was rewritten',
                          head.seq);
    else
        -- An entry without a place in the chain, which the walk never meets.
        select * into entry from ledger.audit_log a where a.seq < 1 order by a.at limit 1;
        if found then
            first_broken_seq := entry.seq;
            problem := format('an entry by %s (%s, %s) is outside the chain: it was written without its place',
                              entry.operator, entry.action, entry.at);
        end if;
    end if;
end
$$;
