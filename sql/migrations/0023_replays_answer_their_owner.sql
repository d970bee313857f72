-- A repeat is answered to the caller that made the key, and to nobody else
-- (docs/contract.md, "A key answers its owner").
--
-- begin_effect answered whoever asked: another agent login with a key and
-- params it had learnt got the stored result of an effect it never made
-- (replay), its reference and final state (stop), or word of a refund in
-- progress (in_flight). Row security already kept that login from reading
-- the row; the writer API read it for them. Now an answer about an existing
-- key goes only to the login that made it (owner_role), to a login of its
-- tenant, or to a superuser's session (break-glass, as for writer_refusal);
-- anyone else gets the decision `refused` and nothing else — no effect id,
-- no state, no result — and the call is kept as a flagged `refused`
-- attempt, so the duplicates pane shows it as a refused call.
--
-- Where the check stands: after open_effect, on its answer. open_effect
-- decides under the target lock and the key's row lock, so the owner read
-- after it is the owner of what was answered, however callers race (a
-- check before it, on a row not yet committed, would let the answer of a
-- key made a moment later through). It costs the path every effect takes
-- nothing: a `proceed` is always the caller's own (a new key, or its own
-- released hold), and only the other answers read the owner. Nothing
-- open_effect does for a foreign login changes the effect: its reopening
-- branches (retry, a safe retry, a released hold) already refuse another
-- login (writer_refusal); what it writes is the attempt it records, which
-- stays beside the refusal (attempts are append-only), whose detail says
-- what was withheld.
--
-- Tombstones: a pruned key is answered as its effect was, so it must keep
-- its owner. Tombstones now record owner_role (and requested_by, for the
-- gateway below), filled from the effect by a trigger as retention writes
-- them. A tombstone written before this migration has no owner: its key is
-- refused to every login but a superuser's session — it still never
-- proceeds, and an operator can read what it was.
--
-- Tenancy: logins are one tenant when one is a member of the other, or both
-- are members of one role whose name begins effect_tenant_:
--     create role effect_tenant_billing;
--     grant effect_tenant_billing to agent_a, agent_b;
-- A tenant shares answers, not rights: only the owner's login may dispatch,
-- retry or complete its effect (writer_refusal, unchanged).
--
-- A gateway is one login for all its callers, and the ledger cannot tell
-- them apart; it names each caller in requested_by and asks, before
-- begin_effect, whether the key is its login's under another requester
-- (ledger.refused_to_requester, below).

alter table ledger.key_tombstones
    add column owner_role text,
    add column requested_by text;

comment on column ledger.key_tombstones.owner_role is
    'The login that made the pruned effect: only it (or its tenant) is answered for the key. Null: pruned before 0023, refused to every login.';
comment on column ledger.key_tombstones.requested_by is
    'The name the pruned effect was requested under (a gateway''s caller).';

-- Filled from the effect being pruned (retention inserts the tombstone
-- before it deletes the row), whichever function writes it.
create function ledger.tombstone_keeps_its_owner() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if new.owner_role is null then
        select e.owner_role, e.requested_by into new.owner_role, new.requested_by
          from ledger.effects e where e.id = new.effect_id;
    end if;
    return new;
end
$$;

create trigger key_tombstones_keep_their_owner
    before insert on ledger.key_tombstones
    for each row execute function ledger.tombstone_keeps_its_owner();
alter table ledger.key_tombstones enable always trigger key_tombstones_keep_their_owner;

-- Whether this session's login is answered about an effect the login
-- `owner` made: its own; a superuser's session; a login that is a member of
-- the owner or of which the owner is a member; a login sharing with the
-- owner a role named effect_tenant_*. A superuser owner is in no tenant
-- (pg_has_role makes a superuser a member of every role). Called only off
-- the hot path, for an answer about a key that is not plainly the caller's.
create function ledger.answers_to(owner text) returns boolean
language sql stable
as $$
    select coalesce(owner = session_user::text, false)
        or ledger.session_is_superuser()
        or exists (
            select 1
              from pg_catalog.pg_roles o, pg_catalog.pg_roles s
             where o.rolname = owner and s.rolname = session_user and not o.rolsuper
               and (pg_catalog.pg_has_role(s.oid, o.oid, 'MEMBER')
                    or pg_catalog.pg_has_role(o.oid, s.oid, 'MEMBER')
                    or exists (select 1 from pg_catalog.pg_roles t
                                where pg_catalog.starts_with(t.rolname::text, 'effect_tenant_')
                                  and pg_catalog.pg_has_role(s.oid, t.oid, 'MEMBER')
                                  and pg_catalog.pg_has_role(o.oid, t.oid, 'MEMBER'))))
$$;

-- The answer to a caller the key is not answered to: the decision alone.
-- The call is kept, flagged, on the effect (a pruned key's tombstone counts
-- it among its replays instead: its effect is gone).
create function ledger.refused_answer(
    effect ledger.effects, withheld text, requested_by text, request_id text, params_hash text,
    refusal text
) returns ledger.begin_answer
language plpgsql
as $$
begin
    if effect.id is not null then
        perform ledger.record_attempt(effect, 'refused', refused_answer.requested_by,
            refused_answer.request_id, refused_answer.params_hash,
            detail => jsonb_build_object('call', 'begin_effect', 'login', session_user::text,
                                         'owner_role', effect.owner_role, 'refused', refusal,
                                         'withheld', withheld),
            flagged => true);
    end if;
    return ('refused'::text, null::bigint, null::text, null::jsonb)::ledger.begin_answer;
end
$$;

-- The writer API's front door, as in 0004, and now: the params are stored
-- and compared by value (0022), and an answer about a key that exists goes
-- only to the caller it is answered to. Only params with a number spelt
-- with a fractional part are walked (the text test costs next to nothing
-- on every other call). A key recorded before 0022, with params spelt as
-- they came, is still answered by the spelling it was recorded with: its
-- retry replays rather than turning into a mismatch.
create or replace function ledger.begin_effect(
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
    during           tstzrange default null
) returns ledger.begin_answer
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    ignored text;
    hidden text;
    offered jsonb := begin_effect.params;
    by_value jsonb;
    answer ledger.begin_answer;
    existing ledger.effects;
    owner text;
begin
    ignored := ledger.forget_caller_settings();
    -- Keys the ledger makes for itself: a row squatting on one would block
    -- a compensation or pass for one.
    if begin_effect.op_key ~* '^(compensate|escalate):' then
        raise exception 'ledger: keys beginning compensate: or escalate: are made by the ledger itself (key %)',
            begin_effect.op_key
            using errcode = 'insufficient_privilege',
                  hint = 'choose another key; compensations are requested with ledger.op_compensate';
    end if;
    -- Approval refs of the same kind: the four-eyes requests' own
    -- (compensation_request:N) authorise only the compensation they name.
    if begin_effect.approval_ref ~* '^compensation_request:' then
        raise exception 'ledger: approval refs beginning compensation_request: are made by the ledger itself (key %)',
            begin_effect.op_key
            using errcode = 'insufficient_privilege';
    end if;
    -- Params nested deeper than any business object need, which readers
    -- (and JSON libraries) refuse to walk.
    if jsonb_path_exists(begin_effect.params, 'lax $.**{65}') then
        raise exception 'ledger: params are nested deeper than 64 levels (key %): pass the material fields, not a deep document',
            begin_effect.op_key
            using errcode = 'invalid_parameter_value';
    end if;
    if ledger.has_hidden_character_in(begin_effect.op_key, begin_effect.action, begin_effect.target) then
        hidden := coalesce('op_key has ' || ledger.hidden_character(begin_effect.op_key),
                           'action has ' || ledger.hidden_character(begin_effect.action),
                           'target has ' || ledger.hidden_character(begin_effect.target));
        raise exception 'ledger: % (an invisible or control character): keys, actions and targets must be visible text',
            hidden
            using errcode = 'invalid_parameter_value';
    end if;
    if offered::text ~ '[0-9]\.[0-9]' then
        by_value := ledger.params_by_value(offered);
        if by_value::text <> offered::text
           and not exists (select 1 from ledger.effects e
                            where e.op_key = begin_effect.op_key
                              and e.params_hash = ledger.params_hash(offered))
           and not exists (select 1 from ledger.key_tombstones t
                            where t.op_key = begin_effect.op_key
                              and t.material_hash = ledger.material_hash(
                                  ledger.params_hash(offered), lower(btrim(begin_effect.action)), begin_effect.target,
                                  begin_effect.amount_minor, upper(begin_effect.currency), begin_effect.provider,
                                  begin_effect.during)) then
            offered := by_value;
        end if;
    end if;
    -- Actions are names, compared as written lower-case and trimmed: Refund
    -- and " refund" are refund, under refund's policy.
    answer := ledger.open_effect(begin_effect.op_key, lower(btrim(begin_effect.action)), begin_effect.target,
                                 offered, begin_effect.requested_by, begin_effect.pending_window,
                                 begin_effect.amount_minor, begin_effect.currency, begin_effect.provider,
                                 begin_effect.approval_ref, begin_effect.approval_version,
                                 begin_effect.request_id, begin_effect.during);
    -- A proceed is the caller's own: a new key, or its own released hold.
    if answer.decision = 'proceed' then
        return answer;
    end if;
    -- Any other answer is about a key that may be another's: read its
    -- owner (the row open_effect locked, else the key's tombstone). A key
    -- with neither was answered about another effect (an overlapping
    -- booking), which the caller must hear of.
    select e.* into existing from ledger.effects e where e.op_key = begin_effect.op_key;
    if found then
        owner := existing.owner_role;
    else
        select t.owner_role into owner from ledger.key_tombstones t where t.op_key = begin_effect.op_key;
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
    return ledger.refused_answer(existing, answer.decision, begin_effect.requested_by, begin_effect.request_id,
        ledger.params_hash(coalesce(offered, '{}'::jsonb)),
        case when owner is null then 'a key pruned before its owner was kept: answered to no login'
             else 'another login''s key' end);
end
$$;

-- For a gateway, one login serving many callers it names in requested_by
-- (gateway:billing/caller:…): whether op_key is this login's effect made
-- under another requested_by. Then the call is kept, flagged, as a refused
-- attempt, and the gateway answers its caller nothing of the effect and
-- does not call begin_effect — whose retry would reopen the other caller's
-- failed effect before the gateway saw the answer. Only the login's own
-- keys are looked at: another login's is begin_effect's to refuse.
create function ledger.refused_to_requester(op_key text, requested_by text, request_id text default null)
returns boolean
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    ignored text;
    existing ledger.effects;
    made_by text;
begin
    ignored := ledger.forget_caller_settings();
    select e.* into existing from ledger.effects e
     where e.op_key = refused_to_requester.op_key and e.owner_role = session_user::text;
    if found then
        made_by := existing.requested_by;
    else
        select t.requested_by into made_by from ledger.key_tombstones t
         where t.op_key = refused_to_requester.op_key and t.owner_role = session_user::text;
    end if;
    if made_by is null or made_by = refused_to_requester.requested_by then
        return false;
    end if;
    if existing.id is not null then
        perform ledger.record_attempt(existing, 'refused', refused_to_requester.requested_by,
            refused_to_requester.request_id, null,
            detail => jsonb_build_object('call', 'begin_effect', 'login', session_user::text,
                                         'owner_role', existing.owner_role, 'made_by', made_by,
                                         'refused', 'another requester''s key'),
            flagged => true);
    end if;
    return true;
end
$$;

revoke execute on function ledger.tombstone_keeps_its_owner(), ledger.answers_to(text),
    ledger.refused_answer(ledger.effects, text, text, text, text, text),
    ledger.refused_to_requester(text, text, text)
    from public;
grant execute on function ledger.refused_to_requester(text, text, text) to effect_agent;
