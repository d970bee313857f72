-- What the writer API's front door checks and answers. The params are stored and compared by value
-- (1500.0 is 1500), and an answer about a key that exists goes only to the
-- caller it is answered to. Only params with a number spelt with a
-- fractional part are walked (the text test costs next to nothing on every
-- other call). A key recorded before params were stored by value, spelt as
-- they came, is still answered by the spelling it was recorded with: its
-- retry replays rather than turning into a mismatch.
-- begin_effect and begin_and_dispatch both end here; the latter says
-- `claim` (open_effect claims a plain new key as it creates it, answered
-- 'claimed'). Not granted to anyone: its callers forget the caller's
-- settings first.
create or replace function ledger.begin_checked(
    op_key           text,
    action           text,
    target           text,
    params           jsonb,
    requested_by     text,
    pending_window   interval default null,
    amount_minor     bigint   default null,
    currency         text     default null,
    provider         text     default null,
    approval_ref     text     default null,
    approval_version integer  default null,
    request_id       text     default null,
    during           tstzrange default null,
    claim            boolean  default false,
    worker           text     default null
) returns ledger.begin_answer
language plpgsql
as $$
declare
    hidden text;
    offered jsonb := begin_checked.params;
    by_value jsonb;
    answer ledger.begin_answer;
    existing ledger.effects;
    owner text;
begin
    -- Keys the ledger makes for itself: a row squatting on one would block
    -- a compensation or pass for one.
    if begin_checked.op_key ~* '^(compensate|escalate):' then
        raise exception 'ledger: keys beginning compensate: or escalate: are made by the ledger itself (key %)',
            begin_checked.op_key
            using errcode = 'insufficient_privilege',
                  hint = 'choose another key; compensations are requested with ledger.op_compensate';
    end if;
    -- Approval refs of the same kind: the four-eyes requests' own
    -- (compensation_request:N) authorise only the compensation they name.
    if begin_checked.approval_ref ~* '^compensation_request:' then
        raise exception 'ledger: approval refs beginning compensation_request: are made by the ledger itself (key %)',
            begin_checked.op_key
            using errcode = 'insufficient_privilege';
    end if;
    -- Params nested deeper than any business object need, which readers
    -- (and JSON libraries) refuse to walk.
    if jsonb_path_exists(begin_checked.params, 'lax $.**{65}') then
        raise exception 'ledger: params are nested deeper than 64 levels (key %): pass the material fields, not a deep document',
            begin_checked.op_key
            using errcode = 'invalid_parameter_value';
    end if;
    if ledger.has_hidden_character_in(begin_checked.op_key, begin_checked.action, begin_checked.target) then
        hidden := coalesce('op_key has ' || ledger.hidden_character(begin_checked.op_key),
                           'action has ' || ledger.hidden_character(begin_checked.action),
                           'target has ' || ledger.hidden_character(begin_checked.target));
        raise exception 'ledger: % (an invisible or control character): keys, actions and targets must be visible text',
            hidden
            using errcode = 'invalid_parameter_value';
    end if;
    if offered::text ~ '[0-9]\.[0-9]' then
        by_value := ledger.params_by_value(offered);
        if by_value::text <> offered::text
           and not exists (select 1 from ledger.effects e
                            where e.op_key = begin_checked.op_key
                              and e.params_hash = ledger.params_hash(offered))
           and not exists (select 1 from ledger.key_tombstones t
                            where t.op_key = begin_checked.op_key
                              and t.material_hash = ledger.material_hash(
                                  ledger.params_hash(offered), ledger.action_name(begin_checked.action), begin_checked.target,
                                  begin_checked.amount_minor, upper(begin_checked.currency), begin_checked.provider,
                                  begin_checked.during)) then
            offered := by_value;
        end if;
    end if;
    answer := ledger.open_effect(begin_checked.op_key, ledger.action_name(begin_checked.action), begin_checked.target,
                                 offered, begin_checked.requested_by, begin_checked.pending_window,
                                 begin_checked.amount_minor, begin_checked.currency, begin_checked.provider,
                                 begin_checked.approval_ref, begin_checked.approval_version,
                                 begin_checked.request_id, begin_checked.during,
                                 begin_checked.claim, begin_checked.worker);
    -- A proceed is the caller's own: a new key, or its own released hold.
    if answer.decision in ('proceed', 'claimed') then
        return answer;
    end if;
    -- Any other answer is about a key that may be another's: read its
    -- owner (the row open_effect locked, else the key's tombstone). A key
    -- with neither was answered about another effect (an overlapping
    -- booking), which the caller must hear of.
    select e.* into existing from ledger.effects e where e.op_key = begin_checked.op_key;
    if found then
        owner := existing.owner_role;
    else
        select t.owner_role into owner from ledger.key_tombstones t where t.op_key = begin_checked.op_key;
        if not found then
            return answer;
        end if;
    end if;
    if ledger.answers_to(owner) then
        return answer;
    end if;
    -- A retry open_effect already refused to this login is kept as its own
    -- refused attempt; the answer still says nothing of the effect.
    if answer.decision = 'rejected' and answer.result ? 'refused' and existing.id is not null then
        existing.id := null;
    end if;
    return ledger.refused_answer(existing, answer.decision, begin_checked.requested_by, begin_checked.request_id,
        ledger.params_hash(coalesce(offered, '{}'::jsonb)),
        case when owner is null then 'a key pruned before its owner was kept: answered to no login'
             else 'another login''s key' end);
end
$$;

revoke all on function ledger.begin_checked(text,text,text,jsonb,text,interval,bigint,text,text,text,integer,text,tstzrange,boolean,text) from public;
