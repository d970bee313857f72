-- Least privilege, in one place: every grant the ledger makes. Roles are
-- cluster-wide, so they are created only if
-- absent (several ledgers may share a cluster, and migrations of several
-- databases may run at once); grants are per database.

do $$
declare
    role_name text;
begin
    foreach role_name in array array['effect_agent', 'effect_operator', 'effect_readonly', 'effect_approver'] loop
        if not exists (select 1 from pg_roles where rolname = role_name) then
            begin
                execute format('create role %I nologin', role_name);
            exception when duplicate_object or unique_violation then
                null; -- another migration created it a moment ago
            end;
        end if;
    end loop;
end
$$;

-- PostgreSQL lets PUBLIC execute every new function; the ledger's functions
-- are granted one by one below.
revoke all on schema ledger from public;
revoke execute on all functions in schema ledger from public;
revoke all on all tables in schema ledger from public;

grant usage on schema ledger to effect_agent, effect_operator, effect_readonly, effect_approver;

-- Agents: the writer API, and their own effects to read back.
grant execute on function
    ledger.begin_effect(text, text, text, jsonb, text, interval, bigint, text, text, text, integer, text,
                        tstzrange),
    ledger.mark_dispatched(text, text, text, text),
    ledger.complete_effect(text, text, text, jsonb, boolean, text, text, text, text, interval, text)
    to effect_agent;
grant select on ledger.effects, ledger.action_policies to effect_agent;

-- "Their own" is the effects their login created (owner_role): an agent of
-- one fleet never reads another fleet's params. Consoles read every row.
-- The ledger's functions run as the schema's owner, whom row security does
-- not restrict, so the writer API sees every key it must answer for.
alter table ledger.effects enable row level security;
create policy effects_agents_read_their_own on ledger.effects
    for select to effect_agent
    using (owner_role = session_user::text);
create policy effects_consoles_read_all on ledger.effects
    for select to effect_operator, effect_readonly
    using (true);

-- Operators: read everything, change rows only through the operator
-- functions. A function named ledger.op_* is an operator action and its
-- name is its grant: adding one needs no line in this file, only a call of
-- ledger.grant_operator_actions() at the end of a migration that comes
-- after this one. No function the owner keeps for itself may carry the prefix.
create function ledger.grant_operator_actions() returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    action regprocedure;
    granted integer := 0;
begin
    for action in select p.oid::regprocedure from pg_proc p
                   where p.pronamespace = 'ledger'::regnamespace and p.proname like 'op\_%'
                   order by p.oid
    loop
        execute format('grant execute on function %s to effect_operator', action);
        granted := granted + 1;
    end loop;
    return granted;
end
$$;
revoke execute on function ledger.grant_operator_actions() from public;
select ledger.grant_operator_actions();

grant select on all tables in schema ledger to effect_operator, effect_readonly;
-- Which actions apply to an effect: the console greys its keys by it.
grant execute on function ledger.why_not(ledger.effects, text), ledger.refusals(text[]),
    ledger.compensation_approval(ledger.effects)
    to effect_operator, effect_readonly;
-- How far behind a standby is, for the console's header.
grant execute on function ledger.replica_lag() to effect_operator, effect_readonly;
grant execute on function
    ledger.record_reconciliation(text, bigint, text, text, text, text[], jsonb, integer),
    ledger.verify_audit_chain()
    to effect_operator;
grant execute on function ledger.verify_audit_chain() to effect_readonly;
grant execute on function ledger.audit_entry_hash(text, bigint, timestamptz, text, text, text, bigint, text, text, jsonb, jsonb)
    to effect_operator, effect_readonly;
-- Views compute ages and call these helpers as the querying role.
grant execute on function ledger.current_actor() to effect_agent, effect_operator, effect_readonly;
-- The history view (0002) says who made a version kept in the row, and why, by these.
grant execute on function ledger.default_reason(text), ledger.default_actor(text, text, text)
    to effect_operator, effect_readonly;

-- Settling: operators get the operator steps, every console may read the records.
grant select on ledger.compensation_requests, ledger.escalation_deliveries, ledger.awaiting_approval
    to effect_operator, effect_readonly;
grant execute on function
    ledger.claim_due_escalations(text, interval, integer, text),
    ledger.record_escalation_delivery(text, integer, text, boolean, text, interval, integer)
    to effect_operator;

-- Finance, reports and time travel are readable by every console; retention
-- (prune_export, prune_settled, prune_review) is the owner's alone — grant
-- execute on prune_settled to a dedicated role to delegate it, never to operators.
grant select on ledger.suspected_double_effects, ledger.exposure to effect_operator, effect_readonly;
-- Every view is read through its function of an instant (views inline them
-- as the querying role), so every console may call each of them.
grant execute on function
    ledger.instant(timestamptz),
    ledger.effects_at(timestamptz),
    ledger.effect_at(bigint, timestamptz),
    ledger.escalations_at(timestamptz),
    ledger.compensation_requests_at(timestamptz),
    ledger.counts_as_duplicate(text),
    ledger.overdue_pending_at(timestamptz),
    ledger.unknown_outcomes_at(timestamptz),
    ledger.duplicate_attempts_at(timestamptz),
    ledger.shown_as_duplicate(ledger.attempts, timestamptz, timestamptz),
    ledger.held_conflicts_at(timestamptz),
    ledger.open_escalations_at(timestamptz),
    ledger.awaiting_approval_at(timestamptz),
    ledger.audit_log_at(timestamptz),
    ledger.pane_counts_at(timestamptz),
    ledger.approved_amount(jsonb),
    ledger.reverses_the_effect(jsonb),
    ledger.compensation_status_at(bigint, timestamptz),
    ledger.suspected_double_effects_at(timestamptz, timestamptz),
    ledger.exposure_at(timestamptz, timestamptz),
    ledger.pane_entries(timestamptz, timestamptz, text, text)
    to effect_operator, effect_readonly;

-- The reconciler service connects as an operator: it settles through the
-- operator functions, as a person would, and leases its work.
grant execute on function
    ledger.lease_for_reconcile(text, interval, interval, integer, timestamptz),
    ledger.end_reconcile_lease(text, text, text, interval, interval),
    ledger.mark_reconcile_escalated(text, text),
    ledger.claim_next_steps(text, interval, integer, bigint[]),
    ledger.end_next_step(bigint, text, boolean, text, interval, interval)
    to effect_operator;

-- Policies: every console reads them; operators change them (op_set_policy), audited.
grant execute on function ledger.policy_snapshot(ledger.action_policies), ledger.policy_for(text)
    to effect_operator, effect_readonly;
grant select on ledger.reconcile_leases, ledger.reconcile_backlog to effect_operator, effect_readonly;

-- The approving system records what it authorises, and revokes it; it
-- reads its approvals and nothing else. Consoles read them all.
grant execute on function
    ledger.grant_approval(text, integer, text, text, timestamptz, text, text, bigint, text, jsonb),
    ledger.revoke_approval(text, integer, text, text)
    to effect_approver;
grant select on ledger.approvals to effect_approver;
grant execute on function ledger.approval_list(bigint) to effect_approver, effect_operator, effect_readonly;
