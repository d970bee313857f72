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
create or replace function ledger.verify_audit_chain(
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

revoke all on function ledger.verify_audit_chain() from public;
grant execute on function ledger.verify_audit_chain() to effect_operator, effect_readonly;
