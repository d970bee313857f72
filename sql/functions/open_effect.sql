-- The four branches of the writer API, for an agent (through begin_effect)
-- and for the ledger's own compensations. Not granted to anyone.
-- Under the target's lock, a key is answered by its effect (locked) if it
-- has one, else by its tombstone if it was pruned; else it is new, and is
-- created here. Each branch is a function of its own, called only when it
-- is taken: nearly every call is a new key, pending, which this function
-- answers alone, with its one insert (a function call costs every writer).
-- A caller that dispatches at once (begin_and_dispatch) says `claim`: such a
-- new key is then inserted claimed by `worker` — one write, not an insert
-- and an update — and answered 'claimed' instead of 'proceed'; its caller
-- records the dispatch attempt and starts the lease, as claim_dispatch does.
-- Any other answer has claimed nothing.
create or replace function ledger.open_effect(
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
#variable_conflict use_column
declare
    offered_params jsonb := coalesce(open_effect.params, '{}'::jsonb);
    offered_hash   text;
    policy         ledger.action_policies;
    existing       ledger.effects;
    -- What the insert returns: only what is read of it after, not the
    -- whole row (a RETURNING list is projected on every begin).
    created        record;
    approval       ledger.approvals;
    refusal        text;
    answer         ledger.begin_answer;
    window_length  interval;
    ignored        text;
    first_try      boolean;
begin
    -- One condition for the four, which every call passes; which one
    -- failed is sorted out only when one did.
    if coalesce(btrim(open_effect.op_key), '') = '' or coalesce(btrim(open_effect.action), '') = ''
       or coalesce(btrim(open_effect.target), '') = '' or coalesce(btrim(open_effect.requested_by), '') = ''
       or jsonb_typeof(offered_params) <> 'object' then
        perform ledger.refuse_begin_arguments(open_effect.op_key, open_effect.action, open_effect.target,
                                              open_effect.requested_by, offered_params);
    end if;
    offered_hash := ledger.params_hash(offered_params);
    ignored := set_config('ledger.actor', open_effect.requested_by, true);

    -- One caller at a time per target: conflict detection and creation must
    -- see each other, and callers of one key converge here without ever
    -- surfacing a unique violation.
    ignored := pg_advisory_xact_lock(hashtextextended('ledger.target:' || open_effect.target, 0))::text;

    policy := ledger.policy_for(open_effect.action);
    -- An action nobody wrote a policy for gets the defaults, unless the
    -- ledger says unknown actions are refused (a misspelt or invented name
    -- would otherwise escape every rule of the real one).
    if policy.updated_at is null
       and (select s.unknown_actions from ledger.ledger_settings s) = 'refuse' then
        raise exception 'ledger: action % has no policy and this ledger refuses unknown actions (key %)',
            open_effect.action, open_effect.op_key
            using errcode = 'invalid_parameter_value',
                  hint = 'use an action with a policy (effectwatch policy list), or have an operator set one';
    end if;
    -- A key that names no approval and no booking range is, nearly always,
    -- new: it is first tried by the one insert below, which creates it only
    -- if no effect and no tombstone holds the key. Whatever that finds is
    -- answered on the full path of the next turn.
    first_try := open_effect.approval_ref is null and open_effect.during is null
                 and not policy.conflicts_by_time_range and not policy.approvals_must_be_registered;
    loop
        if not first_try then
            select e.* into existing from ledger.effects e
             where e.op_key = open_effect.op_key
             for update;
            if found then
                return ledger.answer_taken_key(existing, policy, open_effect.action, open_effect.target,
                    open_effect.amount_minor, open_effect.currency, open_effect.provider, open_effect.during,
                    open_effect.requested_by, open_effect.request_id, offered_hash, offered_params);
            end if;
            answer := ledger.answer_pruned_key(open_effect.op_key, offered_hash, open_effect.action,
                open_effect.target, open_effect.amount_minor, open_effect.currency, open_effect.provider,
                open_effect.during);
            if answer.decision is not null then
                return answer;
            end if;

            -- The approval a new key names must authorise it now (0016).
            approval := ledger.lock_approval(open_effect.approval_ref, open_effect.approval_version);
            refusal := ledger.approval_refusal(approval, open_effect.approval_ref, open_effect.approval_version,
                           policy.approvals_must_be_registered, open_effect.action, open_effect.target,
                           open_effect.amount_minor, upper(open_effect.currency), offered_hash, null,
                           policy.compensation_approval_limit_minor);
            if policy.conflicts_by_time_range then
                if open_effect.during is null or isempty(open_effect.during) then
                    raise exception 'ledger: % conflicts by time range: begin_effect needs its range (during) (key %)',
                        open_effect.action, open_effect.op_key
                        using errcode = 'invalid_parameter_value';
                end if;
                if refusal is null then
                    answer := ledger.answer_double_booking(open_effect.op_key, open_effect.action,
                        open_effect.target, open_effect.during, null, open_effect.requested_by,
                        open_effect.request_id, offered_hash, offered_params);
                    if answer.decision is not null then
                        return answer;
                    end if;
                end if;
            end if;
        end if;

        window_length := coalesce(open_effect.pending_window, policy.pending_window);
        insert into ledger.effects as e (
            op_key, action, target, params, params_hash, amount_minor, currency, provider,
            requested_by, owner_role, approval_ref, approval_version, request_id, state, pending_window,
            deadline_at, held_by, during, double_candidate,
            version, dispatched_at, dispatched_by, dispatched_role)
        select
            open_effect.op_key, open_effect.action, open_effect.target, offered_params, offered_hash,
            open_effect.amount_minor, upper(open_effect.currency), open_effect.provider,
            open_effect.requested_by, session_user, open_effect.approval_ref, open_effect.approval_version,
            open_effect.request_id,
            case when holder_id is null then 'pending' else 'held' end,
            window_length, now() + window_length,
            holder_id,
            -- A refused key keeps no time: it must not stand in a booking's way.
            case when refusal is null then open_effect.during end,
            -- The target lock above makes "another exists" exact: no
            -- second effect of this target and action can begin meanwhile.
            exists (select 1 from ledger.effects x
                     where x.target = open_effect.target and x.action = open_effect.action)
            or coalesce(open_effect.amount_minor > ledger.approved_amount(offered_params), false),
            -- Claimed as it is created: version 2, as begin and a claim
            -- would leave it (the guard checks it is exactly that).
            case when claiming then 2 else 1 end,
            case when claiming then now() end,
            case when claiming then open_effect.worker end,
            case when claiming then session_user end
          from (select 1) one
          -- A held effect points at the open one actually in the way: the
          -- oldest pending or unknown one, else the oldest held one (what
          -- that one was held by may be settled by now); under a time-range
          -- policy, the oldest that overlaps.
          left join lateral (
                select h.id as holder_id from ledger.effects h
                 where h.target = open_effect.target and h.action = open_effect.action
                   and h.state in ('pending', 'unknown', 'held')
                   and (not policy.conflicts_by_time_range or h.during && open_effect.during)
                 order by (h.state = 'held'), h.created_at
                 limit 1) holder
            on refusal is null and (policy.exclusive_per_target or policy.conflicts_by_time_range)
          -- Only the plain new key is claimed here: pending, on the first try.
          cross join lateral (select open_effect.claim and first_try and holder.holder_id is null
                                     as claiming) claimed
         -- On the first try these two are what the full path would have
         -- found; after it, they find what a racing caller made meanwhile.
         -- The conflict clause alone would not do for a taken key: the
         -- guard trigger checks the row, and the identity takes an id,
         -- before the conflict is found, so a repeat call whose arguments
         -- the row's checks refuse would fail instead of being answered.
         where not exists (select 1 from ledger.effects k where k.op_key = open_effect.op_key)
           and not exists (select 1 from ledger.key_tombstones t where t.op_key = open_effect.op_key)
        on conflict on constraint effects_op_key_key do nothing
        returning e.id, e.state, e.held_by, e.target into created;

        -- A new key, pending, on the first try: what nearly every call is,
        -- answered by one condition.
        if found and created.state = 'pending' and first_try then
            return (case when open_effect.claim then 'claimed' else 'proceed' end,
                    created.id, created.state, null::jsonb)::ledger.begin_answer;
        end if;
        if found then
            return ledger.answer_new_key(created.id, created.state, created.held_by, created.target,
                                         refusal, approval);
        end if;
        -- The key is taken (or was pruned), found on the first try or made
        -- by a racing caller under another target lock: the full path
        -- answers it.
        first_try := false;
    end loop;
end
$$;

revoke all on function ledger.open_effect(text,text,text,jsonb,text,interval,bigint,text,text,text,integer,text,tstzrange,boolean,text) from public;
