-- A key whose effect was pruned is answered as it was before the prune,
-- from its tombstone, which counts the replay: a replay weeks later must
-- never refund twice. Another intent under the key is rejected; a success
-- is replayed; anything else is stopped. Null when the key has no
-- tombstone.
create or replace function ledger.answer_pruned_key(
    op_key text, offered_hash text, action text, target text, amount_minor bigint, currency text,
    provider text, during tstzrange
) returns ledger.begin_answer
language plpgsql
as $$
#variable_conflict use_column
declare
    tombstone ledger.key_tombstones;
begin
    update ledger.key_tombstones t
       set replays = t.replays + 1, last_replay_at = now()
     where t.op_key = answer_pruned_key.op_key
    returning t.* into tombstone;
    if not found then
        return null;
    end if;
    if tombstone.material_hash <> ledger.material_hash(
           answer_pruned_key.offered_hash, answer_pruned_key.action, answer_pruned_key.target,
           answer_pruned_key.amount_minor, upper(answer_pruned_key.currency), answer_pruned_key.provider,
           answer_pruned_key.during) then
        return ('rejected'::text, tombstone.effect_id, tombstone.final_state, null::jsonb)::ledger.begin_answer;
    elsif tombstone.final_state = 'succeeded' then
        return ('replay'::text, tombstone.effect_id, tombstone.final_state, tombstone.result)::ledger.begin_answer;
    else
        return ('stop'::text, tombstone.effect_id, tombstone.final_state, tombstone.result)::ledger.begin_answer;
    end if;
end
$$;

revoke all on function ledger.answer_pruned_key(text,text,text,text,bigint,text,text,tstzrange) from public;
