-- The effect ledger: one row per logical action, and the append-only records
-- around it. Every write goes through the functions of the later migrations;
-- the tables carry the invariants that must hold whoever writes.

create schema if not exists ledger;
-- Text equality inside a GiST exclusion constraint (bookings, below).
create extension if not exists btree_gist;

-- Keys, actions and targets are identities people compare by eye. A control
-- or format character (Unicode categories Cc and Cf: zero-width spaces and
-- joiners, bidi controls, soft hyphens, tags…) would hide a difference
-- between two keys or drive the terminal that shows them, so the table
-- refuses them whoever writes (the state machine's guard trigger, 0002,
-- checks every new effect; the three never change after). The class of
-- such characters, written once:
create function ledger.hidden_character_class() returns text
language sql immutable parallel safe
as $$
    select '[\x01-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'::text
$$;

-- Whether text holds one: inlined where it is used, the class folded into
-- the plan. (Not strict, which would keep it from being inlined; null still
-- answers null.)
create function ledger.has_hidden_character(value text) returns boolean
language sql immutable parallel safe
as $$
    select value operator(pg_catalog.~) ledger.hidden_character_class()
$$;

-- Whether an effect's key, action or target holds one: one match over the
-- three joined finds exactly what a match over each would (the class is of
-- single characters), and every new effect is checked twice (begin_effect,
-- then the guard), so the regex runs once each time rather than three.
-- Stable, as concat is, so that it is inlined too.
create function ledger.has_hidden_character_in(op_key text, action text, target text) returns boolean
language sql stable parallel safe
as $$
    select ledger.has_hidden_character(pg_catalog.concat(op_key, action, target))
$$;

-- The first such character as `U+200B at 4`, or null when the text is
-- clean: for the message that refuses it (only ever on that path).
create function ledger.hidden_character(value text) returns text
language sql immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
    select 'U+' || upper(lpad(to_hex(ascii(c.ch)), greatest(4, length(to_hex(ascii(c.ch)))), '0'))
           || ' at ' || c.position
      from unnest(string_to_array(value, null)) with ordinality as c(ch, position)
     where ledger.has_hidden_character(c.ch)
     order by c.position
     limit 1
$$;

create table ledger.action_policies (
    action                       text primary key,
    -- How long a pending effect may wait for its answer before it is overdue.
    pending_window               interval not null default interval '5 minutes',
    -- While one effect of this action is open on a target, a new key for the
    -- same target and action is held instead of dispatched.
    exclusive_per_target         boolean  not null default true,
    -- Compensations above this amount need a second operator's approval;
    -- null means no four-eyes rule for this action.
    compensation_approval_limit_minor bigint check (compensation_approval_limit_minor >= 0),
    -- Whether a reconciliation that finds nothing at the provider may make the
    -- effect retryable under the same key.
    retry_when_absent            boolean  not null default true,
    -- What may happen after an unknown outcome or a failure (DESIGN.md):
    --   safe_retry       the provider deduplicates by our key: an unknown
    --                    effect may be dispatched again under the same key;
    --   reconcile_first  ask the provider before anything else (default);
    --   compensate       settle a doubt by reversing, never by repeating;
    --   never_retry      nothing is sent twice: absent goes to a person;
    --   escalate         every doubt goes to a person at once.
    retry_semantics              text not null default 'reconcile_first'
                                 check (retry_semantics in ('safe_retry', 'reconcile_first', 'compensate',
                                                            'never_retry', 'escalate')),
    -- Where the reconciler sends this action's escalations; null: its default sink.
    escalation_sink              text,
    -- Whether an effect's approval_ref must be one the approving system
    -- registered (ledger.grant_approval); a registered one is always checked.
    approvals_must_be_registered boolean  not null default false,
    -- Bookings: effects of this action conflict when their time ranges on
    -- the target overlap (begin_effect's `during`), not merely by target.
    conflicts_by_time_range      boolean  not null default false,
    -- What becomes of the effects a holder held when it succeeds: 'leave'
    -- them for a person (a real second action on one object), or 'cancel'
    -- them by rule. A holder that fails or is cancelled always releases the
    -- oldest (sql/0008_operator_api.sql, ledger.holds_end_by_rule).
    on_holder_success            text     not null default 'leave'
                                 check (on_holder_success in ('leave', 'cancel')),
    updated_at                   timestamptz not null default now(),
    check (pending_window > interval '0')
);

-- The row's checks (a key, action and target of 1 to 512, 128 and 512
-- characters of visible text; params an object; a currency of three capital
-- letters, given with an amount and only then; a known state, attention and
-- error class; a held effect names its holder; a positive pending window; a
-- non-empty booking range) are made by the state machine's guard trigger
-- (0002) on every insert and update, whoever writes. Not CHECK constraints:
-- PostgreSQL reads each constraint back from its stored text and plans it
-- for every statement that writes the table, which cost the writer a fifth
-- of its CPU (BENCHMARKS.md); the trigger's checks are planned once per
-- session.
create table ledger.effects (
    id                bigint generated always as identity primary key,
    op_key            text not null unique,
    action            text not null,
    target            text not null,
    params            jsonb not null default '{}'::jsonb,
    params_hash       text not null,
    amount_minor      bigint,
    currency          text,
    provider          text,
    requested_by      text not null,
    -- The login role that created the effect: only that login may dispatch
    -- or complete it (requested_by is a name the caller asserts).
    owner_role        text not null default session_user,
    approval_ref      text,
    approval_version  integer,
    request_id        text,
    state             text not null,
    -- When it entered its state (set by the state machine): how long an
    -- item has been unknown or held, at any instant.
    state_since       timestamptz not null default now(),
    pending_window    interval not null,
    deadline_at       timestamptz,
    external_ref      text,
    result            jsonb,
    failure_reason    text,
    retryable         boolean,
    -- Set when a result arrived after the effect was settled another way.
    late_result_at    timestamptz,
    -- Set by a reconciliation that found a duplicate or a mismatch: a person
    -- must escalate or compensate.
    attention         text,
    version           bigint not null default 1,
    created_at        timestamptz not null default now(),
    dispatched_at     timestamptz,
    dispatched_by     text,
    dispatched_role   text,
    updated_at        timestamptz not null default now(),
    settled_at        timestamptz,
    compensates       bigint references ledger.effects (id),
    held_by           bigint references ledger.effects (id),
    -- An operator has seen this key's repeated and flagged calls up to here
    -- (ledger.op_acknowledge_duplicates): the duplicates pane shows only
    -- what came after; the attempts themselves stay.
    duplicates_acknowledged_at timestamptz,
    -- The class of the worker's last error (timeout, connection_reset,
    -- server_error, invalid_response, business_rejection, rate_limited), and
    -- for a rate limit when the same key may be sent again.
    error_class       text,
    retry_not_before  timestamptz,
    -- A booking's time range, for an action whose policy conflicts by time
    -- range; part of the intent (a different range is another booking).
    during            tstzrange,
    -- Set at creation when another effect of the same target and action
    -- exists, or when the amount is above what the params' approval states:
    -- only a group holding such an effect (or one the provider holds twice,
    -- attention 'duplicate') can be a suspected double effect, so finance
    -- reads those groups by their index instead of every success.
    double_candidate  boolean not null default false,
    -- Whether the version it was created with is a row of
    -- ledger.effect_versions. An effect its requester creates pending, as
    -- every agent's new key is, writes none: that version is the row's own
    -- creation columns (pending since created_at, due at created_at +
    -- pending_window, by requested_by as owner_role), and
    -- ledger.effect_history reads it from them. Set by the guard trigger.
    creation_version_stored boolean not null default true,
    -- Whether the row's latest version, when it is not its creation, is the
    -- row's own columns rather than a row of ledger.effect_versions. An
    -- agent's plain dispatch or answer writes none: that version is
    -- pending -> state at updated_at, as owner_role, by and for the reason
    -- ledger.default_actor and ledger.default_reason give (the dispatching
    -- worker for a dispatch, the requester for an answer that names no
    -- worker), and the guard trigger keeps it as a row of its own only when
    -- the next change supersedes it.
    latest_version_in_row boolean not null default false,
    -- No code path, not even a hand-written insert, can double-book: two
    -- bookings of one target whose ranges overlap cannot both be open or
    -- done (held ones wait outside it; compensated ones have left it).
    constraint effects_no_double_booking exclude using gist (target with =, action with =, during with &&)
        where (during is not null and state in ('pending', 'unknown', 'succeeded'))
);

-- Every index on this table is written by every writer call that changes
-- the row (an update that changes the state is never HOT), so each one has
-- to earn its place on the hot path (see BENCHMARKS.md).
--
-- By target: the conflict check of every begin_effect (the open effects on
-- a target, oldest first), finance's groups and the detail view's related
-- effects. One index for all three: a target has few effects.
create index effects_target_idx on ledger.effects (target, action, created_at);
create index effects_compensates_idx on ledger.effects (compensates) where compensates is not null;
create index effects_external_ref_idx on ledger.effects (external_ref) where external_ref is not null;
-- Finance's groups (see double_candidate): an entry for the few effects
-- that can make a double, none for the effect that goes well.
create index effects_double_candidate_idx on ledger.effects (target, action)
    where double_candidate or attention = 'duplicate';
-- Rows are appended and updated in time order, so a block range summary is
-- enough to find what changed since T (time travel, finance's since) or
-- settled before a cutoff (retention, reports over a range) and costs the
-- writer nothing per row, where a b-tree costs an entry for every insert
-- and every update. One index for both times: a BRIN serves a condition on
-- either column, and each index on this table costs every writer statement
-- an open and an insert call whether or not its summary changes.
create index effects_times_idx on ledger.effects using brin (updated_at, settled_at);

-- The writer calls beyond the happy path's own, so duplicates and
-- mismatches can be seen and replayed: every call for a key that already
-- exists, each dispatch claim, refused calls, repeated and late results. The
-- first call and the outcome are the effect's row and its versions (who,
-- when, why), so the path of an effect that goes well writes no attempt
-- beyond its dispatch.
-- The attempts that make a key a duplicate: a call for a key that already
-- existed, whatever it was answered. One list, for the index, the pane and
-- the reports.
create function ledger.counts_as_duplicate(kind text) returns boolean
language sql immutable parallel safe as $$
    select kind in ('replay', 'in_flight', 'retry', 'stop', 'mismatch', 'held', 'wait',
                    'late_result', 'dispatch_refused', 'refused')
$$;

-- The four history tables (attempts, effect_versions, reconciliations,
-- audit_log) are partitioned by month of `at` (sql/0018_history_partitions.sql
-- makes the months), so retention drops a month instead of deleting its
-- rows; each has a default partition, `<table>_kept`, holding the rows of
-- dropped months that belong to an effect still in the ledger. Their keys
-- carry `at`, as a partitioned table's must; what stays unique without it:
-- an id, because only its identity sequence assigns it; an effect's version,
-- because only the history trigger writes it, under the effect's row lock;
-- the audit chain's seq, because ledger.audit_head moves under its row lock.
-- They name their effect without a foreign key: only the ledger's own
-- functions write them, for an effect they have just read, and a key would
-- make every delete of an effect probe every month of every history table
-- while retention holds them locked.
create table ledger.attempts (
    id            bigint generated always as identity,
    effect_id     bigint not null,
    op_key        text not null,
    kind          text not null check (kind in
                    ('replay', 'in_flight', 'retry', 'stop', 'mismatch', 'held', 'wait', 'overlap',
                     'dispatch', 'dispatch_refused', 'completion_repeat', 'late_result',
                     'refused', 'released')),
    requested_by  text,
    -- The login role that made the call, beside the name it gave.
    db_role       text not null default session_user,
    request_id    text,
    params_hash   text,
    -- The params offered, kept only when they differ from the effect's own.
    params        jsonb,
    detail        jsonb,
    flagged       boolean not null default false,
    at            timestamptz not null default now(),
    primary key (id, at)
) partition by range (at);
create table ledger.attempts_kept partition of ledger.attempts default;

create index attempts_effect_idx on ledger.attempts (effect_id, at);
create index attempts_duplicate_idx on ledger.attempts (at) where ledger.counts_as_duplicate(kind);
create index attempts_flagged_idx on ledger.attempts (effect_id) where flagged;

-- The history of every effect: one row per version, written by the state
-- machine's triggers, never updated; a version its effect's row can say
-- (its creation, and its latest) is kept in the row instead (see
-- creation_version_stored and latest_version_in_row above, and
-- ledger.effect_history).
-- It is both the audit of state changes (ledger.effect_events is the rows
-- where the state changed, with who and why) and the ledger as of any
-- instant: ledger.effects_at(T) overlays the version current at T on the
-- effect's row, so the panes, finance and time travel read one definition
-- at any instant. `id` numbers the rows in the order they were written;
-- an effect's versions are ordered by `version` (not indexed: nothing looks
-- a version up by its id).
create table ledger.effect_versions (
    id              bigint generated always as identity,
    -- No foreign key: only the history trigger of the effect row writes
    -- here, in the transaction that changed the row, so a reference check
    -- would re-prove that on the writer's hot path, twice per effect.
    -- Retention deletes an effect's versions with it.
    effect_id       bigint not null,
    version         bigint not null,
    at              timestamptz not null default now(),
    -- The state before this version (null for the first), and who made it.
    from_state      text,
    state           text not null,
    actor           text not null,
    db_role         text not null,
    reason          text,
    state_since     timestamptz not null,
    dispatched_at   timestamptz,
    deadline_at     timestamptz,
    external_ref    text,
    failure_reason  text,
    retryable       boolean,
    late_result_at  timestamptz,
    attention       text,
    settled_at      timestamptz,
    held_by         bigint,
    duplicates_acknowledged_at timestamptz,
    error_class     text,
    retry_not_before timestamptz,
    primary key (effect_id, version, at)
) partition by range (at);
create table ledger.effect_versions_kept partition of ledger.effect_versions default;

-- What entered the unknown and held panes over a range (reports).
create index effect_versions_unknown_held_idx on ledger.effect_versions (at)
    where state in ('unknown', 'held') and from_state is distinct from state;

-- The same for the rarely written rows that change: escalations and
-- compensation requests, each version kept whole.
create table ledger.row_versions (
    id          bigint generated always as identity primary key,
    relname     text not null check (relname in ('escalations', 'compensation_requests')),
    row_id      bigint not null,
    at          timestamptz not null default now(),
    image       jsonb not null
);

create index row_versions_row_idx on ledger.row_versions (relname, row_id, id);

-- Which effect holds which: one row per hold, closed when released or cancelled.
create table ledger.holds (
    id              bigint generated always as identity primary key,
    effect_id       bigint not null references ledger.effects (id),
    holder_id       bigint not null references ledger.effects (id),
    target          text not null,
    created_at      timestamptz not null default now(),
    closed_at       timestamptz,
    closed_how      text check (closed_how in ('released', 'cancelled')),
    closed_by       text,
    -- When the held call, asked again after its release, was told to proceed
    -- (once: the calls after it are in flight).
    answered_at     timestamptz
);

create index holds_open_idx on ledger.holds (target, effect_id) where closed_at is null;
-- Retention deletes effects: every foreign key naming an effect needs an
-- index on its column, or each effect deleted reads the whole referencing
-- table (the effects table itself, for held_by). The rows that name an
-- effect this way are few, so these cost the writer almost nothing.
create index holds_effect_idx on ledger.holds (effect_id);
create index holds_holder_idx on ledger.holds (holder_id);
create index effects_held_by_idx on ledger.effects (held_by) where held_by is not null;

create table ledger.reconciliations (
    id              bigint generated always as identity,
    effect_id       bigint not null,
    op_key          text not null,
    provider        text,
    finding         text not null check (finding in
                      ('exists_once', 'absent', 'duplicate', 'mismatch', 'indeterminate')),
    external_refs   text[] not null default '{}',
    evidence        jsonb not null default '{}'::jsonb,
    duration_ms     integer,
    state_before    text not null,
    state_after     text not null,
    requested_by    text not null,
    at              timestamptz not null default now(),
    primary key (id, at)
) partition by range (at);
create table ledger.reconciliations_kept partition of ledger.reconciliations default;

create index reconciliations_effect_idx on ledger.reconciliations (effect_id, at);

create table ledger.escalations (
    id               bigint generated always as identity primary key,
    -- Delivery is keyed by this: a retried delivery never becomes a second page.
    escalation_key   text not null unique,
    effect_id        bigint not null references ledger.effects (id),
    op_key           text not null,
    sink             text not null,
    decision_needed  text not null,
    payload          jsonb not null,
    state            text not null default 'open' check (state in
                       ('open', 'delivered', 'failed', 'acknowledged', 'resolved')),
    delivery_attempts integer not null default 0,
    last_error       text,
    next_attempt_at  timestamptz not null default now(),
    -- The code of the decision it asks for (ledger.decision_needed).
    decision         text,
    created_by       text not null,
    created_at       timestamptz not null default now(),
    delivered_at     timestamptz,
    acknowledged_at  timestamptz,
    acknowledged_by  text,
    resolved_at      timestamptz,
    resolved_by      text,
    updated_at       timestamptz not null default now()
);

create index escalations_open_idx on ledger.escalations (next_attempt_at)
    where state in ('open', 'failed');
create index escalations_unresolved_idx on ledger.escalations (created_at)
    where state <> 'resolved';
create index escalations_effect_idx on ledger.escalations (effect_id);
create index escalations_decision_idx on ledger.escalations (effect_id, decision);

-- Append-only and hash-chained: seq orders the chain, hash covers the entry
-- and the previous hash, so an altered or removed entry breaks every later one.
create table ledger.audit_log (
    seq         bigint not null,
    at          timestamptz not null default now(),
    operator    text not null,
    db_role     text not null,
    action      text not null,
    effect_id   bigint,
    op_key      text,
    reason      text,
    before      jsonb,
    after       jsonb,
    prev_hash   text not null,
    hash        text not null,
    primary key (seq, at)
) partition by range (at);
create table ledger.audit_log_kept partition of ledger.audit_log default;

create index audit_log_effect_idx on ledger.audit_log (effect_id, seq);
create index audit_log_at_idx on ledger.audit_log (at);

create table ledger.compensation_requests (
    id                   bigint generated always as identity primary key,
    effect_id            bigint not null references ledger.effects (id),
    op_key               text not null,
    state                text not null check (state in ('awaiting_approval', 'created', 'rejected')),
    amount_minor         bigint,
    currency             text,
    -- The limit in force when requested; null: no approval was needed.
    approval_limit_minor bigint,
    requested_by         text not null,
    requested_role       text not null default session_user,
    reason               text not null,
    decided_by           text,
    decided_role         text,
    decided_at           timestamptz,
    decision_reason      text,
    compensation_id      bigint references ledger.effects (id),
    compensation_key     text,
    -- Set when the request reverses a duplicate provider record of the
    -- effect (ledger.op_reverse_duplicate) rather than the effect itself.
    duplicate_ref        text,
    created_at           timestamptz not null default now(),
    updated_at           timestamptz not null default now(),
    check ((state = 'created') = (compensation_id is not null))
);

-- At most one request per effect waits for approval.
create unique index compensation_requests_awaiting_idx
    on ledger.compensation_requests (effect_id) where state = 'awaiting_approval';
create index compensation_requests_effect_idx on ledger.compensation_requests (effect_id, created_at);
create index compensation_requests_compensation_idx on ledger.compensation_requests (compensation_id)
    where compensation_id is not null;

-- Every delivery attempt of an escalation, for the console and a post-mortem.
create table ledger.escalation_deliveries (
    id             bigint generated always as identity primary key,
    escalation_id  bigint not null references ledger.escalations (id),
    attempt        integer not null,
    worker         text not null,
    ok             boolean not null,
    error          text,
    duration_ms    integer,
    at             timestamptz not null default now()
);

create index escalation_deliveries_idx on ledger.escalation_deliveries (escalation_id, at);

-- Indexes for reading by time: a report over a range, time travel and
-- retention cost what happened in that range, not the whole ledger
-- (effects by updated_at and settled_at: effects_times_idx, above).
create index reconciliations_at_idx on ledger.reconciliations (at);
-- Duplicate attempts by time: ledger.attempts_duplicate_idx (above).

-- The panes. Each is served by a partial index over the rows that can
-- appear in it, so a poll costs what is open, not what the ledger has seen.
create index effects_pending_deadline_idx on ledger.effects (deadline_at) where state = 'pending';
-- The unknown and held panes and finance's compensated exposure share one:
-- every writer statement opens each partial index on this table and tests
-- its predicate, whether or not it adds an entry (BENCHMARKS.md). By state,
-- then settled_at: an unknown or held effect is open (settled_at is null),
-- and its pane reads the few of its state whole; a compensation is settled,
-- and exposure reads those settled since T.
create index effects_watched_idx on ledger.effects (state, settled_at)
    where state in ('unknown', 'held', 'compensated');

-- The reconciler service's leases (sql/0014_reconciler.sql): which
-- reconciler holds an effect until when, how often it was asked, and when
-- it may be asked again. Coordination, not a change to the effect: no
-- audit entry of its own (what a reconciler does under it is audited).
create table ledger.reconcile_leases (
    effect_id      bigint primary key references ledger.effects (id) on delete cascade,
    -- Who holds the lease and until when; null once the pass is over.
    claimed_by     text,
    claimed_until  timestamptz,
    -- Passes that asked the provider about this effect and left it open.
    tries          integer not null default 0 check (tries >= 0),
    -- Not asked again before this: the backoff after an answer that
    -- settled nothing.
    next_try_at    timestamptz not null default now(),
    last_finding   text,
    last_try_at    timestamptz,
    -- When a person was asked to decide (once per effect).
    escalated_at   timestamptz,
    -- The effect's version when a reconciler saw it settled: a lease taken
    -- on an older reading of it is refused, and one on a newer (the effect
    -- opened again by a safe retry) is not.
    settled_version bigint
);

-- The next step of a flow of several (sql/0014_reconciler.sql): a finding
-- that needs its duplicates reversed or a person told, a compensation that
-- exists and must be sent. Each is recorded in the same transaction as the
-- step before it and closed in the transaction that takes it, so a crash
-- between two steps leaves work that any reconciler (or an operator) picks
-- up, never a flag with nobody told. Coordination, like a lease: what opens
-- and closes a step is audited by the function that does it.
create table ledger.next_steps (
    id            bigint generated always as identity primary key,
    effect_id     bigint not null references ledger.effects (id) on delete cascade,
    step          text not null check (step in ('reverse_duplicates', 'escalate', 'send_compensation')),
    -- Why the step is owed, in the words a person reads in `show`.
    why           text not null,
    recorded_by   text not null,
    recorded_at   timestamptz not null default now(),
    -- A reconciler takes it up from then on: now, or after a backoff.
    due_at        timestamptz not null default now(),
    tries         integer not null default 0 check (tries >= 0),
    claimed_by    text,
    claimed_until timestamptz,
    last_error    text,
    done_at       timestamptz,
    done_by       text,
    outcome       text
);
-- One open step of a kind per effect: recording it again is a no-op.
create unique index next_steps_open_idx on ledger.next_steps (effect_id, step) where done_at is null;
create index next_steps_due_idx on ledger.next_steps (due_at) where done_at is null;

-- What is left of a pruned effect (sql/0013_retention.sql): enough for
-- begin_effect to answer a replay weeks later as it answered before the
-- prune (replay, stop or rejected), never proceed. Kept much longer than
-- effects, and dropped only by ledger.prune_tombstones.
create table ledger.key_tombstones (
    op_key        text primary key,
    -- The pruned effect's id (identities are never reused): what a replay
    -- is told, as before the prune.
    effect_id     bigint not null,
    -- The action, target, params, amount, currency and provider in one
    -- (ledger.material_hash): a replay that changes any of them is rejected.
    material_hash text not null,
    final_state   text not null check (final_state in ('succeeded', 'failed', 'cancelled')),
    external_ref  text,
    result        jsonb,
    settled_at    timestamptz not null,
    pruned_at     timestamptz not null default now(),
    -- Calls for the key after its prune, so an operator can see them.
    replays       integer not null default 0,
    last_replay_at timestamptz
);
create index key_tombstones_pruned_idx on ledger.key_tombstones using brin (pruned_at);

-- What an approving system authorised (sql/0016_approvals.sql): one
-- action on one target, up to an amount, with these params if given, until
-- it expires; a newer version supersedes the older. An approval authorises
-- one effect: the first that begins under it consumes it.
create table ledger.approvals (
    approval_ref         text not null check (length(approval_ref) between 1 and 256),
    version              integer not null check (version >= 1),
    action               text not null,
    target               text not null,
    amount_ceiling_minor bigint check (amount_ceiling_minor >= 0),
    currency             text check (currency ~ '^[A-Z]{3}$'),
    -- Null: any params (within the ceiling); else exactly these (ledger.params_hash).
    params_hash          text,
    expires_at           timestamptz not null,
    granted_by           text not null,
    granted_at           timestamptz not null default now(),
    revoked_at           timestamptz,
    revoked_by           text,
    revoke_reason        text,
    consumed_by          bigint references ledger.effects (id),
    consumed_at          timestamptz,
    primary key (approval_ref, version),
    check ((amount_ceiling_minor is null) = (currency is null))
);

create index approvals_consumed_by_idx on ledger.approvals (consumed_by) where consumed_by is not null;

