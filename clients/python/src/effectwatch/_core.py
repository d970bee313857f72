"""What the sync and asyncio ledgers share: the three SQL calls, their
answers, and the rules that turn an answer or an exception into what the
client does. Every rule of the ledger itself stays in the database."""

from __future__ import annotations

import inspect
import logging
import socket
import time
import typing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import PoolClosed

from ._keys import KeyMaker, Terms, ToolKeys, params_by_value, whole_minor_units
from .errors import (
    EffectError,
    Held,
    InFlight,
    Misuse,
    NotPerformed,
    NotYours,
    Overlap,
    ProviderError,
    RateLimited,
    Rejected,
    Stop,
    Wait,
)

# Integers are cast in the SQL: psycopg sends the smallest type that fits.
# begin_effect and, with dispatch => true when it answers proceed or retry,
# mark_dispatched: one transaction, one round trip. A rejected call is
# answered with what differs (`differences`).
# Both claims start the call's heartbeat lease with the claim itself, in the
# same transaction, when heartbeat_lease is given (null: no lease; the
# make_interval of a null is null), and answer the lease in force, in
# seconds: the action's policy may set another than the one asked for, and
# the beats follow the ledger's (null: no lease asked, or nothing claimed).
BEGIN_SQL = """select decision, effect_id, state, result, dispatched, refused, differences,
    extract(epoch from lease_in_force)::float8 as lease_in_force
    from ledger.begin_and_dispatch(
    op_key => %(op_key)s, action => %(action)s, target => %(target)s, params => %(params)s,
    requested_by => %(requested_by)s, amount_minor => %(amount_minor)s::bigint,
    currency => %(currency)s, provider => %(provider)s, request_id => %(request_id)s,
    worker => %(worker)s, dispatch => %(dispatch)s,
    heartbeat_lease => make_interval(secs => %(heartbeat_lease)s::float8))"""

DISPATCH_SQL = """select claimed, state, refused,
    extract(epoch from lease_in_force)::float8 as lease_in_force from ledger.mark_dispatched(
    op_key => %(op_key)s, request_id => %(request_id)s, worker => %(worker)s, target => %(target)s,
    heartbeat_lease => make_interval(secs => %(heartbeat_lease)s::float8))"""

COMPLETE_SQL = """select applied, state, late, refused from ledger.complete_effect(
    op_key => %(op_key)s, outcome => %(outcome)s, external_ref => %(external_ref)s,
    result => %(result)s, retryable => %(retryable)s, reason => %(reason)s,
    request_id => %(request_id)s, worker => %(worker)s, error_class => %(error_class)s,
    retry_after => make_interval(secs => %(retry_after)s::float8), target => %(target)s)"""

# A beat for a provider call in progress: its worker is alive, and its
# lease runs `lease` seconds from now, or what the action's policy sets
# (`lease_in_force`, seconds: the next beats follow it) (README, "Heartbeats").
HEARTBEAT_SQL = """select alive, state, lease_until,
    extract(epoch from lease_in_force)::float8 as lease_in_force from ledger.heartbeat(
    op_key => %(op_key)s, lease => make_interval(secs => %(lease)s::float8), worker => %(worker)s)"""

# Read while a caller waits for another's call of its key to settle.
STATE_SQL = """select state from ledger.effects where op_key = %(op_key)s"""

# Read only when a call's reply was lost, before it is sent again and after:
# whether its first send was carried out for this attempt (`own_begin`,
# `own_claim`, `moved_on`). An agent login reads its own effects only.
OWN_SQL = """select id, state, dispatched_at is not null as dispatched, request_id,
    owner_role = session_user::text as owned from ledger.effects where op_key = %(op_key)s"""

MAY_RUN = ("proceed", "retry")

# The connections a ledger makes for itself, unless it is given a pool:
# named so in pg_stat_activity, at most this many at once (opened as calls
# need them, kept idle between calls), and how long a call waits for one of
# them (all busy, or the ledger out of reach) before it is sent again on a
# connection of its own. A pool that cannot connect gives up after as long:
# the next call tries again at once, rather than after a growing backoff.
APPLICATION_NAME = "effectwatch-python"
POOL_SIZE = 10
POOL_WAIT = 5.0


def pool_settings(
    conninfo: str | None, pool: object | None, application_name: str | None, max_connections: int | None
) -> tuple[str | None, int | None]:
    """The application name and size of the pool a ledger makes on
    `conninfo`, checked when the ledger is made; (None, None) for a pool the
    caller passes (`pool=`), whose connections are the caller's to set."""
    if (conninfo is None) == (pool is None):
        raise ValueError("a ledger is made on a conninfo or on a pool (pool=...): one of the two")
    if pool is not None:
        if application_name is not None or max_connections is not None:
            raise ValueError(
                "application_name and max_connections are for the pool a ledger makes on a conninfo: "
                "set them on the pool you pass"
            )
        return None, None
    if max_connections is not None and not (isinstance(max_connections, int) and max_connections >= 1):
        raise ValueError(f"max_connections is 1 or more, not {max_connections!r}")
    return application_name or APPLICATION_NAME, max_connections or POOL_SIZE


def statement_timeout(milliseconds: int | None) -> int | None:
    """The statement timeout asked for, in ms (None: none; 0 is none too,
    as PostgreSQL has it)."""
    if milliseconds is not None and not (
        isinstance(milliseconds, int) and not isinstance(milliseconds, bool) and milliseconds >= 0
    ):
        raise ValueError(f"statement_timeout_ms is whole milliseconds, 0 or more, or None, not {milliseconds!r}")
    return milliseconds


def startup_options(milliseconds: int | None) -> str | None:
    """The statement timeout of the connections a ledger makes, sent when
    each starts. PgBouncer refuses the `options` startup parameter: behind
    it, set statement_timeout on the login role (ALTER ROLE ... SET), or
    pass a pool, on which it is set in each call's transaction instead."""
    return None if milliseconds is None else f"-c statement_timeout={milliseconds}"


def set_local(milliseconds: int | None) -> str | None:
    """On a pool the caller passed, whose connections did not start with
    the ledger's statement timeout: what begins each call's transaction and
    sets it there, one round trip (the statement and its commit follow).
    PgBouncer in transaction mode takes it. None: no timeout asked, each
    call one autocommit statement."""
    return None if milliseconds is None else f"begin; set local statement_timeout = {milliseconds}"

# A call whose connection was lost is sent again, on a new connection, after
# each of these pauses (seconds): three more tries over about two seconds.
RETRY_PAUSES = (0.2, 0.6, 1.2)


# A completion whose connection is lost carries the provider's answer, which
# nothing else has: it is sent again for longer, up to `completion_retry_for`
# seconds from its first failure (a Patroni failover of a dead leader takes
# about 20 s), after pauses from the first of these doubling to the second.
COMPLETION_FIRST_PAUSE = 0.2
COMPLETION_LONGEST_PAUSE = 2.0


def completion_retry_for(seconds: float) -> float:
    """The bound on sending a completion again, in seconds: 0 or more (0:
    three more tries over about two seconds, as any other call)."""
    if not seconds >= 0:
        raise ValueError(f"completion_retry_for is seconds, 0 or more, not {seconds!r}")
    return float(seconds)


class Resends:
    """When a call whose connection was lost is sent again: after each of
    `RETRY_PAUSES`, or for a completion (`completing`, its key) with a
    bound, after pauses doubling from 0.2 s to 2 s until `retry_for`
    seconds have passed since its first failure, each said at warning on
    the `effectwatch` logger. `pause` answers None once no try is left."""

    def __init__(self, completing: str | None = None, retry_for: float = 0.0) -> None:
        self.completing = completing
        self.retry_for = retry_for
        self._pauses = iter(RETRY_PAUSES)
        self._next = COMPLETION_FIRST_PAUSE
        self._since: float | None = None

    def pause(self, error: BaseException) -> float | None:
        if self.completing is None or self.retry_for <= 0:
            return next(self._pauses, None)
        now = time.monotonic()
        if self._since is None:
            self._since = now
        out = now - self._since
        left = self.retry_for - out
        if left <= 0:
            logger.error(
                "the ledger stayed out of reach for %.1f s (completion_retry_for): the provider's answer for %s "
                "is not recorded, and the effect stays dispatched for the reconciler (%s)",
                out, self.completing, message_line(error),
            )
            return None
        pause = min(self._next, left)
        self._next = min(self._next * 2, COMPLETION_LONGEST_PAUSE)
        logger.warning(
            "the ledger is out of reach; keeping the provider's answer for %s and trying again in %.1f s "
            "(out of reach for %.1f s, of at most %.0f s: %s)",
            self.completing, pause, out, self.retry_for, message_line(error),
        )
        return pause


def message_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def connection_lost(error: BaseException) -> bool:
    """Whether a ledger call failed for its connection rather than being
    answered: no SQLSTATE (the connection closed or was refused, the reply
    never came), a connection exception (08) or the server shutting down
    (57P01-57P03). The ledger may have carried the call out. An error the
    ledger answered (a refusal, a check, a timeout it cancelled) is never
    sent again. A pool that gave no connection in time (`PoolTimeout`)
    sent nothing, and may give one a moment later; a closed pool never
    will (`PoolClosed`: said at once)."""
    if not isinstance(error, psycopg.OperationalError) or isinstance(error, PoolClosed):
        return False
    state = error.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def own_begin(row: Mapping[str, Any] | None, attempt_id: str | None) -> bool:
    """Whether a begin whose reply was lost began the effect for this
    attempt: pending, not dispatched, this login's, and carrying this
    attempt's id. Read before the begin is sent again (it then need not be:
    the attempt goes on as `proceed`), and after, when the repeat answers
    `in_flight` (the first send may commit after the read). Who calls the
    provider is still decided by `mark_dispatched`, which claims once."""
    return (
        attempt_id is not None
        and row is not None
        and row["state"] == "pending"
        and not row["dispatched"]
        and bool(row["owned"])
        and row["request_id"] == attempt_id
    )


def own_claim(row: Mapping[str, Any] | None, attempt_id: str | None) -> bool:
    """Whether a dispatch whose reply was lost claimed the effect for this
    attempt: pending, dispatched, this login's, and carrying this attempt's
    id (a claim writes its id over the begin's). Read before the dispatch is
    sent again, and after, when the repeat answers not claimed."""
    return (
        attempt_id is not None
        and row is not None
        and row["state"] == "pending"
        and bool(row["dispatched"])
        and bool(row["owned"])
        and row["request_id"] == attempt_id
    )


def begun_before(row: Mapping[str, Any] | None, attempt_id: str | None, dispatch: bool) -> Begun | None:
    """What a begin whose reply was lost did for this attempt, from the
    effect read back: `proceed` if it began the effect (`own_begin`), and,
    for a begin that also dispatches, `proceed` and dispatched if it claimed
    it too (`own_claim`: the one transaction committed). None: it did
    neither, as far as the row shows."""
    if row is None:
        return None
    if dispatch and own_claim(row, attempt_id):
        return Begun("proceed", row["id"], "pending", None, dispatched=True)
    if own_begin(row, attempt_id):
        return Begun("proceed", row["id"], "pending", None)
    return None


def begun_of(row: Mapping[str, Any]) -> Begun:
    return Begun(
        row["decision"], row["effect_id"], row["state"], row["result"],
        dispatched=bool(row.get("dispatched")), refused=row.get("refused"), differences=row.get("differences"),
        lease_in_force=row.get("lease_in_force"),
    )


def moved_on(row: Mapping[str, Any] | None, attempt_id: str | None) -> bool:
    """Whether a completion whose reply was lost must not be sent again:
    the key carries another attempt's id and that attempt has gone past its
    begin (dispatched, or settled), so this completion was recorded and the
    key reopened since. Sent again, it would settle the other attempt's
    call. (A key taken again but not yet dispatched is completed again:
    that attempt's claim then fails and it never calls the provider.)"""
    return (
        attempt_id is not None
        and row is not None
        and row["request_id"] is not None
        and row["request_id"] != attempt_id
        and (bool(row["dispatched"]) or row["state"] != "pending")
    )


# The ledger's bounds on a heartbeat's lease (ledger.heartbeat), seconds.
SHORTEST_LEASE = 1.0
LONGEST_LEASE = 3600.0

# Where a heartbeat says what it cannot raise into the caller's function.
logger = logging.getLogger("effectwatch")


def heartbeat_lease(lease: float | None) -> float | None:
    """The lease each beat gives a provider call in progress, checked when
    the ledger is made rather than at the first beat."""
    if lease is not None and not SHORTEST_LEASE <= lease <= LONGEST_LEASE:
        raise ValueError(
            f"heartbeat_lease={lease!r}: a lease is from {SHORTEST_LEASE:g} to {LONGEST_LEASE:g} seconds, "
            "or None for no heartbeats"
        )
    return lease


def lease_of(lease: float | None, ledgers: float | None) -> float:
    """The lease a beat asks for: the one given, else the ledger's."""
    chosen = heartbeat_lease(lease if lease is not None else ledgers)
    if chosen is None:
        raise ValueError("no lease to beat with: this ledger's heartbeats are off (heartbeat_lease=None)")
    return chosen


def heartbeat_args(op_key: str, lease: float, worker: str) -> dict[str, Any]:
    return {"op_key": op_key, "lease": lease, "worker": worker}


def dispatch_args(
    op_key: str, target: str, request_id: str | None, worker: str, lease: float | None = None
) -> dict[str, Any]:
    """mark_dispatched's arguments; `lease` (seconds) starts the call's
    heartbeat lease with the claim."""
    return {"op_key": op_key, "target": target, "request_id": request_id, "worker": worker,
            "heartbeat_lease": lease}


def beat_interval(lease: float) -> float:
    """A beat every third of the lease, the first a third of a lease after
    the claim that started it (a call shorter than that sends none): the
    lease outlasts one lost beat, not two in a row."""
    return lease / 3


def lease_told(beat: Beat, lease: float) -> float:
    """The lease the beats after this one go by: the one in force it was
    answered (an action's policy may set the lease, and change it while the
    call runs), else the one they went by."""
    return beat.lease_in_force if beat.lease_in_force is not None else lease


@dataclass(frozen=True)
class Beat:
    """What a heartbeat answered: whether the call is still this worker's
    to finish (false once the effect was completed, or declared lost when
    an earlier lease ran out: `state` says which, `unknown` for lost),
    until when its lease now runs, and the lease in force in seconds (the
    action's policy's when it sets one, else the one asked for; both None
    when not alive)."""

    alive: bool
    state: str
    lease_until: datetime | None = None
    lease_in_force: float | None = None


def beat_of(row: Mapping[str, Any] | None) -> Beat:
    if row is None:
        raise AssertionError("the ledger answered a heartbeat with no row")
    return Beat(bool(row["alive"]), str(row["state"]), row.get("lease_until"), row.get("lease_in_force"))


def beat_failed(op_key: str, lease: float, error: BaseException) -> None:
    logger.warning(
        "a heartbeat for %s failed (%s: %s); the next is due in %.1f s",
        op_key, type(error).__name__, error, beat_interval(lease),
    )


def beats_go_on(op_key: str, beat: Beat) -> bool:
    """Whether the beats go on after this one. A beat told the call is no
    longer in flight is the last: it says so, once, if the ledger declared
    the call lost (`unknown`), and nothing if the call was completed
    meanwhile (by an operator, or by this call racing its beat)."""
    if beat.alive:
        return True
    if beat.state == "unknown":
        logger.warning(
            "the ledger declared this call lost (%s is %s, no longer in flight): heartbeats stop; "
            "its answer will still be recorded",
            op_key, beat.state,
        )
    return False


# How long a waiting caller sleeps between two looks at the key's state:
# from the first pause, doubled each time, up to the last.
FIRST_PAUSE = 0.05
LAST_PAUSE = 1.0


def keeps_waiting(begun: Begun, state: str | None) -> bool:
    """Whether a caller told `in_flight` may wait for the call in flight:
    only while it is `pending` (another caller is at the provider). An
    `unknown` effect is settled by the reconciler or an operator, not by
    waiting, so the caller is told at once."""
    return begun.decision == "in_flight" and state == "pending"


@dataclass(frozen=True)
class Begun:
    """What begin_effect answered. A `refused` answer (another caller's key)
    carries no effect id and no state: both are None."""

    decision: str
    effect_id: int | None
    state: str | None
    result: Any
    # Asked to dispatch too: whether this call claimed the effect, and why
    # the claim was refused (mark_dispatched's answer).
    dispatched: bool = False
    refused: str | None = None
    # A rejected call's terms that differ: [{field, recorded, now}].
    differences: Any = None
    # A claim that started a lease: the lease in force, in seconds (the
    # action's policy's when it sets one, else the one asked for), which
    # the beats follow. None: no lease, or not known (a claim whose reply
    # was lost, read back).
    lease_in_force: float | None = None


@dataclass(frozen=True)
class Dispatch:
    claimed: bool
    state: str
    refused: str | None
    # See `Begun.lease_in_force`.
    lease_in_force: float | None = None


@dataclass(frozen=True)
class Completed:
    applied: bool
    state: str
    late: bool
    refused: str | None


@dataclass(frozen=True)
class Intent:
    op_key: str
    action: str
    target: str
    params: Mapping[str, Any]
    amount_minor: int | None = None
    currency: str | None = None
    provider: str | None = None
    request_id: str | None = None

    def begin_args(
        self, requested_by: str, *, dispatch: bool = False, lease: float | None = None
    ) -> dict[str, Any]:
        """begin_and_dispatch's arguments; `lease` (seconds) starts the
        call's heartbeat lease with the claim, when `dispatch` claims it."""
        return {
            "worker": requested_by,
            "dispatch": dispatch,
            "heartbeat_lease": lease if dispatch else None,
            "op_key": self.op_key,
            "action": self.action,
            "target": self.target,
            "params": Jsonb(dict(self.params)),
            "requested_by": requested_by,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "provider": self.provider,
            "request_id": self.request_id,
        }


def complete_args(
    op_key: str,
    target: str,
    outcome: str,
    worker: str,
    *,
    external_ref: str | None = None,
    result: Any = None,
    retryable: bool | None = None,
    reason: str | None = None,
    error_class: str | None = None,
    retry_after: float | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    return {
        "op_key": op_key,
        "target": target,
        "outcome": outcome,
        "external_ref": external_ref,
        "result": None if result is None else Jsonb(result),
        "retryable": retryable,
        "reason": reason,
        "error_class": error_class,
        "retry_after": retry_after,
        "request_id": request_id,
        "worker": worker,
    }


def differences(begun: Begun) -> dict[str, tuple[Any, Any]]:
    """The terms a rejected call changed, field by field (params by key),
    as the ledger said them (none when the effect was pruned)."""
    said = begun.differences if isinstance(begun.differences, list) else []
    return {str(d["field"]): (d.get("recorded"), d.get("now")) for d in said if isinstance(d, dict)}


def refusal_for(begun: Begun, intent: Intent) -> EffectError:
    """The exception for a decision that forbids calling the provider."""
    result = begun.result if isinstance(begun.result, dict) else {}
    state = begun.state or ""
    if begun.decision == "refused":
        return NotYours(intent.op_key)
    if begun.decision == "in_flight":
        return InFlight(intent.op_key, state)
    if begun.decision == "held":
        return Held(intent.op_key, state)
    if begun.decision == "rejected":
        return Rejected(intent.op_key, state, differences(begun))
    if begun.decision == "stop":
        return Stop(intent.op_key, state, begun.result)
    if begun.decision == "overlap":
        return Overlap(intent.op_key, state, result.get("overlaps"))
    if begun.decision == "wait":
        return Wait(intent.op_key, state, float(result.get("retry_after_seconds", 60)))
    raise AssertionError(f"the ledger answered a decision this client does not know: {begun.decision}")


@dataclass(frozen=True)
class Outcome:
    """How a provider call that raised is recorded."""

    outcome: str
    error_class: str | None
    retryable: bool | None
    reason: str
    retry_after: float | None = None


def outcome_of(error: BaseException) -> Outcome:
    """Only an explicit not-performed is a failure: anything else raised
    after dispatch may have happened at the provider, so it is unknown."""
    described = f"{type(error).__name__}: {error}"
    if isinstance(error, RateLimited):
        return Outcome("failed", "rate_limited", True, described, error.retry_after)
    if isinstance(error, NotPerformed):
        if error.retryable:
            return Outcome("failed", None, True, described)
        return Outcome("failed", "business_rejection", False, described)
    if isinstance(error, (TimeoutError, socket.timeout)):
        return Outcome("unknown", "timeout", None, described)
    if isinstance(error, ConnectionError):
        return Outcome("unknown", "connection_reset", None, described)
    status = getattr(error, "status", getattr(error, "code", None))
    if isinstance(error, ProviderError) or (isinstance(status, int) and 500 <= status <= 599):
        return Outcome("unknown", "server_error", None, described)
    if isinstance(error, (ValueError, KeyError, TypeError)):
        return Outcome("unknown", "invalid_response", None, described)
    return Outcome("unknown", None, None, described)


@dataclass(frozen=True)
class Ended:
    """How an effect's block ended on an exception, kept on that exception
    (`ended_by`) for whoever catches it — an agent framework's adapter — to
    tell whether the provider may have acted: `dispatched` says the call was
    claimed (the provider may have been reached), `recorded` what the ledger
    was told of this call, at the end or before it (None: nothing, as on a
    replay or another caller's effect)."""

    op_key: str
    dispatched: bool
    recorded: Outcome | None

    @property
    def maybe_performed(self) -> bool:
        if self.recorded is not None:
            return self.recorded.outcome in ("unknown", "succeeded")
        return self.dispatched


def ended_with(op_key: str, dispatched: bool, seen: Outcome | None, recorded_before: str | None) -> Ended:
    """The mark of a block that ends on an exception: what its end records
    (`seen`), else what the block recorded itself (`succeeded()` without
    `dispatched()` records unknown, then raises)."""
    if seen is None and recorded_before is not None:
        seen = Outcome(recorded_before, None, None, "recorded before the block ended")
    return Ended(op_key, dispatched, seen)


ENDED = "__effectwatch_ended__"


def mark(error: BaseException, ended: Ended) -> None:
    # The innermost effect says it: an effect around another leaves the mark.
    if ENDED not in vars(error):
        setattr(error, ENDED, ended)


def ended_by(error: BaseException) -> Ended | None:
    """The mark an effect's block left on `error`, or on the exception it
    was raised from (a wrapper that turned one exception into another)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        ended = vars(current).get(ENDED)
        if isinstance(ended, Ended):
            return ended
        current = current.__cause__ or current.__context__
    return None


class Replayed(Exception):
    """Ends a replayed effect's block at dispatched(): the provider is
    never reached."""


def ending(
    *, replayed: bool, dispatched: bool, completed: bool, not_ours: bool, error: BaseException | None
) -> Outcome | None:
    """What leaving an effect's block records, if anything. A replay
    records nothing: its effect was settled before this call, and anything
    said of it now would be a late result against that settlement. An
    effect completed here, or claimed by another caller, is not ours to
    record either."""
    if replayed or completed or not_ours:
        return None
    if error is None:
        if dispatched:
            return Outcome("unknown", None, None, "the block ended without succeeded()")
        return Outcome("failed", None, True, "not dispatched: the block ended first")
    if not dispatched and not isinstance(error, (NotPerformed, RateLimited)):
        # The provider was never called: the same key may run again once
        # the cause is fixed (cancelled would close the key for good).
        return Outcome("failed", None, True, f"not dispatched: {type(error).__name__}: {error}")
    return outcome_of(error)


# Why succeeded() without dispatched() is recorded unknown: the provider
# was called without the claim that keeps two callers from both calling it.
UNCLAIMED_SUCCESS = "succeeded() without dispatched(): the provider may have been reached without the effect claimed"


def dispatched_twice(op_key: str) -> Misuse:
    return Misuse(
        f"dispatched() was called twice for {op_key}: call it once, just before the provider call. "
        "The second call claimed nothing; the effect is recorded unknown if the block ends on this error, "
        "since the provider may have been reached."
    )


def success_unclaimed(op_key: str) -> Misuse:
    return Misuse(
        f"succeeded() was called for {op_key} without dispatched(): the effect is recorded unknown, not "
        "succeeded, since nothing claimed it before the provider call. Call dispatched() just before "
        "the provider call; an operator or the reconciler settles this one."
    )


def success_replayed(op_key: str) -> Misuse:
    return Misuse(
        f"succeeded() was called for {op_key}, which was replayed: it was settled before, its stored "
        "result is in .result, and nothing was recorded. Call dispatched() before the provider call: "
        "on a replay it ends the block without reaching the provider."
    )


def annotated(function: Callable[..., Any], parameter: inspect.Parameter, *types: type) -> type | None:
    """Which of `types` the parameter is annotated with, if any: resolved
    where the function's module can resolve it, else read by its name."""
    try:
        annotation = typing.get_type_hints(function).get(parameter.name, parameter.annotation)
    except Exception:  # an annotation that names what the module cannot resolve
        annotation = parameter.annotation
    for kind in types:
        if annotation is kind or (isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == kind.__name__):
            return kind
    return None


def effect_parameter(
    function: Callable[..., Any], dispatch: str, effect_type: type, other_type: type
) -> str | None:
    """The parameter that receives the effect: with `dispatch="manual"`, the
    function's first, and the function calls `dispatched()` itself just
    before the provider call. None with `dispatch="auto"`, where an argument
    annotated as an effect is a mistake said when the tool is declared."""
    if dispatch not in ("auto", "manual"):
        raise ValueError(f"dispatch={dispatch!r}: it is 'auto' (dispatched() before the function) or 'manual'")
    parameters = list(inspect.signature(function).parameters.values())
    if dispatch == "auto":
        for parameter in parameters:
            if annotated(function, parameter, effect_type, other_type):
                raise ValueError(
                    f"{function.__name__} takes {parameter.name} as an effect: say dispatch='manual' "
                    f"(the effect is then its first parameter), or it would be an argument of the call"
                )
        return None
    first = parameters[0] if parameters else None
    if first is None or first.kind not in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD):
        raise ValueError(
            f"{function.__name__} is declared with dispatch='manual': its first parameter receives the "
            f"{effect_type.__name__}, e.g. def {function.__name__}(effect: {effect_type.__name__}, order_id: str)"
        )
    if annotated(function, first, other_type):
        raise ValueError(
            f"{function.__name__} takes {first.name}: {other_type.__name__}, which this ledger's tool cannot "
            f"give: annotate it {effect_type.__name__}"
        )
    return first.name


class ToolIntents:
    """What each call of a decorated tool is as an effect: its key, target
    and params, made by `_keys.ToolKeys` from the call's arguments as the
    function binds them (its defaults included). With `dispatch="manual"`,
    the function's first parameter is not an argument of the call: the
    function gets the effect there (`effect_parameter`)."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        action: str,
        op_key: str | KeyMaker,
        target: str | KeyMaker,
        params: Callable[..., Mapping[str, Any]] | None,
        normalise: Mapping[str, Sequence[str] | str] | None,
        amount_minor: str | None,
        currency: str | None,
        provider: str | None,
        dispatch: str,
        effect_type: type,
        other_type: type,
    ) -> None:
        self.effect_parameter = effect_parameter(function, dispatch, effect_type, other_type)
        signature = inspect.signature(function)
        self.signature = signature.replace(
            parameters=[p for p in signature.parameters.values() if p.name != self.effect_parameter]
        )
        self.keys = ToolKeys(
            function.__name__,
            list(self.signature.parameters),
            op_key=op_key,
            target=target,
            params=params,
            normalise=normalise,
            amount_minor=amount_minor,
            currency=currency,
        )
        self.action = action
        self.provider = provider

    def of_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Intent, inspect.BoundArguments]:
        """A call's intent, and the call as the function receives it: its
        money an integer and its normalised strings normalised, so that a
        provider key the function builds from them is the ledger's."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        terms = self.keys.terms(bound.arguments)
        bound.arguments.update(terms.arguments)
        return self.of(terms), bound

    def invoke(self, function: Callable[..., Any], call: inspect.BoundArguments, effect: Any) -> Any:
        """Calls the function as the tool declared its arguments, with the
        effect where it takes one."""
        if self.effect_parameter is None:
            return function(*call.args, **call.kwargs)
        return function(effect, *call.args, **call.kwargs)

    def present(self, run: Callable[..., Any], function: Callable[..., Any]) -> None:
        """Shows the decorated tool with the business arguments only, for
        the frameworks that read a tool's schema from its signature: the
        effect a function takes is not the model's to give."""
        if self.effect_parameter is None:
            return
        setattr(run, "__signature__", self.signature)
        annotations = dict(getattr(function, "__annotations__", {}))
        annotations.pop(self.effect_parameter, None)
        run.__annotations__ = annotations

    def of_keywords(self, arguments: Mapping[str, Any]) -> Intent:
        """A call named by keyword, where an argument left out is missing
        rather than an error of Python's: the key says which."""
        bound = self.signature.bind_partial(**arguments)
        bound.apply_defaults()
        return self.of(self.keys.terms(bound.arguments))

    def of(self, terms: Terms) -> Intent:
        return Intent(
            terms.op_key, self.action, terms.target, terms.params, terms.amount_minor, terms.currency, self.provider
        )


def other_effect_type(effect_type: type) -> type:
    """The other face's effect: what a tool of the ledger whose effect is
    `effect_type` cannot be given (`effect_parameter`). Imported late: each
    face's module imports this one."""
    from .aio import AsyncEffect
    from .ledger import Effect

    return Effect if effect_type is AsyncEffect else AsyncEffect


def registered(intents: Mapping[Callable[..., Any], ToolIntents], tool: Callable[..., Any]) -> ToolIntents:
    """The intents of a tool this ledger decorated, found through any
    wrappers around it that say what they wrap (`functools.wraps` sets
    `__wrapped__`)."""
    current: Any = tool
    for _ in range(100):
        found = intents.get(current) if callable(current) else None
        if found is not None:
            return found
        current = getattr(current, "__wrapped__", None)
        if current is None:
            break
    raise ValueError(
        f"{getattr(tool, '__name__', tool)!r} is not a tool this ledger decorated, nor a wrapper of one "
        "(a wrapper made with functools.wraps is followed)"
    )


def effect_intent(
    op_key: str,
    action: str,
    target: str,
    params: Mapping[str, Any],
    amount_minor: int | None,
    currency: str | None,
    provider: str | None,
    request_id: str | None,
) -> Intent:
    """The intent of `ledger.effect(...)`: params by value and the amount
    a whole number, as a tool's are."""
    amount = None if amount_minor is None else whole_minor_units(amount_minor, "amount_minor")
    return Intent(op_key, action, target, params_by_value(params), amount, currency, provider, request_id)
