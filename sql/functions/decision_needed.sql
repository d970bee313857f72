-- The decision a person must take about an effect as it is now: a stable
-- code (part of the escalation key) and the sentence a reviewer reads.
create or replace function ledger.decision_needed(effect ledger.effects, out code text, out description text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if exists (select 1 from ledger.compensation_requests r
                where r.effect_id = (effect).id and r.state = 'awaiting_approval') then
        code := 'approve_compensation';
        description := 'A compensation of this effect waits for a second operator: approve or reject it';
    elsif (effect).attention = 'duplicate' then
        code := 'duplicate';
        description := 'The provider holds this effect more than once: compensate the extra one or accept it';
    elsif (effect).attention = 'mismatch' then
        code := 'mismatch';
        description := 'The provider''s effect differs from the ledger''s: correct it, compensate or accept it';
    elsif (effect).state = 'unknown' then
        code := 'unknown_outcome';
        description := 'Nobody can prove whether this effect happened: reconcile it or resolve it with evidence';
    elsif (effect).state = 'pending' and (effect).deadline_at < now() then
        code := 'overdue';
        description := 'No answer past its deadline: reconcile it or resolve it with evidence';
    elsif (effect).state = 'held' then
        code := 'held';
        description := 'Held behind another effect on the same target: release it or cancel it';
    elsif (effect).late_result_at is not null then
        code := 'late_result';
        description := 'A result arrived after the effect was settled another way: check which one is true';
    elsif (effect).state = 'failed' and coalesce((effect).retryable, false) then
        code := 'failed_retryable';
        description := 'Failed, and may be retried under the same key: let the agent retry, or close the matter';
    elsif (effect).state = 'failed' then
        code := 'failed';
        description := 'Failed for good: decide whether the business action needs another way';
    else
        code := 'review';
        description := 'Review this effect';
    end if;
end
$$;

revoke all on function ledger.decision_needed(ledger.effects) from public;
