-- Every version of every effect: the rows of ledger.effect_versions; the
-- version each effect was created with where that is the row's own creation
-- columns (creation_version_stored is false; id 0 sorts it first); and its
-- latest version where that is the row's own columns (latest_version_in_row;
-- id 2^53 - 1, above any row's and exact in a JSON reader, sorts it last;
-- it gets a row's id when the next change stores it). Time travel, state
-- changes, reports and retention's export all read this.
create or replace view ledger.effect_history as
select v.id, v.effect_id, v.version, v.at, v.from_state, v.state, v.actor, v.db_role, v.reason,
       v.state_since, v.dispatched_at, v.deadline_at, v.external_ref, v.failure_reason, v.retryable,
       v.late_result_at, v.attention, v.settled_at, v.held_by, v.duplicates_acknowledged_at,
       v.error_class, v.retry_not_before
  from ledger.effect_versions v
union all
select 0::bigint, e.id, 1::bigint, e.created_at, null::text, 'pending'::text, e.requested_by,
       e.owner_role, null::text, e.created_at, null::timestamptz, e.created_at + e.pending_window,
       null::text, null::text, null::boolean, null::timestamptz, null::text, null::timestamptz,
       null::bigint, null::timestamptz, null::text, null::timestamptz
  from ledger.effects e
 where not e.creation_version_stored
union all
select 9007199254740991::bigint, e.id, e.version, e.updated_at, 'pending'::text, e.state,
       ledger.default_actor(e.state, e.requested_by, e.dispatched_by), e.owner_role,
       ledger.default_reason(e.state), e.state_since,
       e.dispatched_at, e.deadline_at, e.external_ref, e.failure_reason, e.retryable,
       e.late_result_at, e.attention, e.settled_at, e.held_by, e.duplicates_acknowledged_at,
       e.error_class, e.retry_not_before
  from ledger.effects e
 where e.latest_version_in_row;

revoke all on ledger.effect_history from public;
grant select on ledger.effect_history to effect_operator, effect_readonly;
