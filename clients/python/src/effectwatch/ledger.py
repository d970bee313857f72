"""The synchronous client: `Ledger.effect(...)` and `@Ledger.tool(...)`."""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import os
import threading
import time
import uuid
from dataclasses import replace
from types import TracebackType
from typing import Any, Callable, Concatenate, Literal, Mapping, ParamSpec, Sequence, TypeVar, cast, overload

import psycopg
from psycopg.rows import dict_row

from . import _core
from ._core import Beat, Begun, Completed, Dispatch, Intent
from ._keys import KeyMaker
from .errors import LedgerRefused

P = ParamSpec("P")
R = TypeVar("R")


class Ledger:
    """A writer of the effect ledger. Each call is one short autocommit
    transaction: no transaction stays open across the provider call, and a
    connection is only kept idle between calls (up to `max_idle`, 0 to
    connect for every call; opening one costs more than the call itself).
    Statements are never prepared, so the ledger may sit behind PgBouncer
    in transaction mode, where an idle client holds no server connection.
    A call whose connection is lost is sent again, a few times, on a new
    connection; a call sent again recognises what its first send did for
    the same request id (README, "A lost reply"); a completion, which
    carries the provider's answer, is sent again with backoff for up to
    `completion_retry_for` seconds (0: as any other call), each try said at
    warning on the `effectwatch` logger. A provider call's claim
    starts its lease of `heartbeat_lease` seconds (1 to 3600; None: no
    lease, no heartbeats), in the same statement, and while the call runs
    a thread beats for it every third of the lease, the first a third of a
    lease after the claim, so that a worker that dies mid-call is unknown
    once its lease runs out (README, "Heartbeats"). The action's policy may
    set the lease instead: the beats go by the lease the ledger answers."""

    def __init__(
        self,
        conninfo: str,
        *,
        requested_by: str,
        application_name: str = "effectwatch-python",
        statement_timeout_ms: int | None = None,
        max_idle: int = 4,
        heartbeat_lease: float | None = 15.0,
        completion_retry_for: float = 30.0,
    ) -> None:
        self.conninfo = conninfo
        self.requested_by = requested_by
        self.application_name = application_name
        self.statement_timeout_ms = statement_timeout_ms
        self.max_idle = max_idle
        self.heartbeat_lease = _core.heartbeat_lease(heartbeat_lease)
        self.completion_retry_for = _core.completion_retry_for(completion_retry_for)
        self._idle: list[psycopg.Connection[dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # What each tool this ledger decorated makes of its arguments.
        self._intents: dict[Callable[..., Any], _core.ToolIntents] = {}
        # Whether a decorated tool with nothing to check first begins and
        # claims its effect in one round trip (False: two, as before; the
        # bench compares them).
        self._one_round_trip = True
        # The thread that sends this ledger's heartbeats, made with the
        # first call that beats (and again in a forked child).
        self._metronome: Metronome | None = None

    def _options(self) -> str | None:
        # PgBouncer refuses the `options` startup parameter: behind it, set
        # statement_timeout on the login role instead (ALTER ROLE ... SET).
        if self.statement_timeout_ms is None:
            return None
        return f"-c statement_timeout={self.statement_timeout_ms}"

    def _connect(self) -> psycopg.Connection[dict[str, Any]]:
        return psycopg.connect(
            self.conninfo,
            autocommit=True,
            prepare_threshold=None,
            row_factory=dict_row,
            application_name=self.application_name,
            options=self._options(),
        )

    def _checkout(self) -> psycopg.Connection[dict[str, Any]]:
        with self._lock:
            if self._pid != os.getpid():
                # A forked child must not talk on its parent's sockets.
                self._idle.clear()
                self._pid = os.getpid()
            while self._idle:
                connection = self._idle.pop()
                if not (connection.closed or connection.broken):
                    return connection
        return self._connect()

    def _checkin(self, connection: psycopg.Connection[dict[str, Any]]) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle and self._pid == os.getpid():
                self._idle.append(connection)
                return
        connection.close()

    def _one(self, sql: str, args: Mapping[str, Any], *, fresh: bool = False) -> dict[str, Any] | None:
        connection = self._connect() if fresh else self._checkout()
        try:
            row = connection.execute(sql, args).fetchone()
        except BaseException:
            connection.close()
            raise
        self._checkin(connection)
        return row

    def _call(
        self,
        sql: str,
        args: Mapping[str, Any],
        *,
        instead: Callable[[], dict[str, Any] | None] | None = None,
        completing: str | None = None,
    ) -> tuple[dict[str, Any] | None, bool]:
        """Runs one statement, sent again on a new connection when its
        connection is lost (`_core.connection_lost`) and never when the
        ledger answered an error. Answers the row and whether it was sent
        again: a lost reply may hide a call the ledger carried out. Before
        sending it again, `instead` may answer a row in its place."""
        resends = _core.Resends(completing, self.completion_retry_for)
        again = False
        while True:
            try:
                if again and instead is not None:
                    answered = instead()
                    if answered is not None:
                        return answered, True
                return self._one(sql, args, fresh=again), again
            except Exception as error:
                if not _core.connection_lost(error):
                    raise
                pause = resends.pause(error)
                if pause is None:
                    raise
            time.sleep(pause)
            again = True

    def _own(self, op_key: str) -> dict[str, Any] | None:
        return self._call(_core.OWN_SQL, {"op_key": op_key})[0]

    # The three SQL calls, answered as they are; a call sent again after its
    # reply was lost recognises what its first send did for the same
    # request id (README, "A lost reply").

    def begin(self, intent: Intent, *, dispatch: bool = False, lease: bool = False) -> Begun:
        """begin_effect and, with `dispatch` when it answers proceed or
        retry, mark_dispatched, in one round trip (`Begun.dispatched`: this
        call claimed the effect). With `lease` (and heartbeats on), the
        claim starts the call's heartbeat lease: the caller then beats for
        it (`beat_for`) until its completion, or the effect is unknown
        once the lease runs out. Without it, the claim holds no lease and
        keeps the pending window's rule."""

        def begun_before() -> dict[str, Any] | None:
            own = self._one(_core.OWN_SQL, {"op_key": intent.op_key}, fresh=True)
            before = _core.begun_before(own, intent.request_id, dispatch)
            if before is None:
                return None
            return {"decision": before.decision, "effect_id": before.effect_id, "state": before.state,
                    "result": None, "dispatched": before.dispatched, "refused": None, "differences": None}

        row, again = self._call(
            _core.BEGIN_SQL,
            intent.begin_args(self.requested_by, dispatch=dispatch, lease=self._lease_if(lease)),
            instead=begun_before,
        )
        assert row is not None
        begun = _core.begun_of(row)
        if again and begun.decision == "in_flight":
            # The first send may have committed after the read: in flight,
            # by this attempt's own begin (and claim).
            before = _core.begun_before(self._own(intent.op_key), intent.request_id, dispatch)
            if before is not None:
                return before
        return begun

    def mark_dispatched(
        self, op_key: str, *, target: str, request_id: str | None = None, lease: bool = False
    ) -> Dispatch:
        """Claims the effect for its provider call. With `lease` (and
        heartbeats on), the claim starts the call's heartbeat lease, as
        with `begin`."""

        def claimed_before() -> dict[str, Any] | None:
            own = self._one(_core.OWN_SQL, {"op_key": op_key}, fresh=True)
            if not _core.own_claim(own, request_id):
                return None
            return {"claimed": True, "state": "pending", "refused": None}

        row, again = self._call(
            _core.DISPATCH_SQL,
            _core.dispatch_args(op_key, target, request_id, self.requested_by, self._lease_if(lease)),
            instead=claimed_before,
        )
        assert row is not None
        dispatch = Dispatch(row["claimed"], row["state"], row["refused"], row.get("lease_in_force"))
        if again and not dispatch.claimed and not dispatch.refused and _core.own_claim(self._own(op_key), request_id):
            return Dispatch(True, "pending", None)
        return dispatch

    def complete(self, op_key: str, *, target: str, outcome: str, **fields: Any) -> Completed:
        args = _core.complete_args(op_key, target, outcome, self.requested_by, **fields)

        def recorded_and_moved_on() -> dict[str, Any] | None:
            own = self._one(_core.OWN_SQL, {"op_key": op_key}, fresh=True)
            if own is None or not _core.moved_on(own, args["request_id"]):
                return None
            return {"applied": False, "state": own["state"], "late": False, "refused": None}

        row, _ = self._call(_core.COMPLETE_SQL, args, instead=recorded_and_moved_on, completing=op_key)
        assert row is not None
        return Completed(row["applied"], row["state"], row["late"], row["refused"])

    def heartbeat(self, op_key: str, *, lease: float | None = None) -> Beat:
        """One beat: the worker running `op_key`'s provider call is alive,
        and its lease runs `lease` seconds (default: `heartbeat_lease`)
        from now, or the lease the action's policy sets, which the answer
        says (`Beat.lease_in_force`). Never sent again on a lost
        connection: the next beat is its retry."""
        args = _core.heartbeat_args(op_key, _core.lease_of(lease, self.heartbeat_lease), self.requested_by)
        return _core.beat_of(self._one(_core.HEARTBEAT_SQL, args))

    def beat_for(self, op_key: str, lease: float | None = None) -> Heartbeats | None:
        """Heartbeats for `op_key`'s provider call, claimed just now with
        its lease (`lease=True`), until they are stopped: the first a third
        of a lease from now, then one every third of a lease, off the
        caller's thread. `lease`: the lease in force its claim answered
        (`Begun.lease_in_force`, `Dispatch.lease_in_force`: the action's
        policy may set one), else `heartbeat_lease`; from each beat on, the
        lease in force it is answered. None when heartbeats are off."""
        if self.heartbeat_lease is None:
            return None
        return self._beats(op_key, lease if lease is not None else self.heartbeat_lease)

    def _beats(self, op_key: str, lease: float | None) -> Heartbeats | None:
        """The beats of a call claimed with its lease: `lease`, the lease in
        force its claim answered. None (not known: a claim whose reply was
        lost, read back) sends the first beat at once, by `heartbeat_lease`,
        and its answer tells the lease in force."""
        if self.heartbeat_lease is None:
            return None
        with self._lock:
            if self._metronome is None or self._metronome.pid != os.getpid():
                self._metronome = Metronome(self)
            metronome = self._metronome
        if lease is None:
            return metronome.start(op_key, self.heartbeat_lease, first_in=0.0)
        return metronome.start(op_key, lease)

    def _lease_if(self, lease: bool) -> float | None:
        """The lease a claim starts, in seconds: none unless asked for, and
        none with heartbeats off."""
        return self.heartbeat_lease if lease else None

    def state_of(self, op_key: str) -> str | None:
        """The key's state as the ledger has it now (None: no such effect)."""
        row = self._call(_core.STATE_SQL, {"op_key": op_key})[0]
        return None if row is None else str(row["state"])

    # The primitive and the decorator.

    def effect(
        self,
        op_key: str,
        *,
        action: str,
        target: str,
        params: Mapping[str, Any],
        amount_minor: int | None = None,
        currency: str | None = None,
        provider: str | None = None,
        request_id: str | None = None,
        wait_in_flight: float | None = None,
    ) -> Effect:
        """Begins the effect: `proceed` and `retry` run the block; `replay`
        ends it at `dispatched()` with the stored result in `.result`; any
        other decision raises its exception (`effectwatch.errors`). Numbers
        in `params` are sent by value; `amount_minor` must be a whole
        number (else `BadArgument`, before anything is written).
        `wait_in_flight` (seconds): told `in_flight` while another caller's
        call of this key is at the provider (`pending`), wait up to that long
        for it to settle, then begin again (a replay returns its result);
        an `unknown` key is answered at once. `request_id` names this
        attempt (one is made if not given): every call of the effect sends
        it, and a call sent again after a lost reply knows its own by it;
        two callers never share one."""
        intent = _core.effect_intent(op_key, action, target, params, amount_minor, currency, provider, request_id)
        return Effect(self, intent, wait_in_flight=wait_in_flight)

    @overload
    def tool(
        self,
        *,
        action: str,
        op_key: str | KeyMaker,
        target: str | KeyMaker,
        params: Callable[..., Mapping[str, Any]] | None = None,
        normalise: Mapping[str, Sequence[str] | str] | None = None,
        amount_minor: str | None = None,
        currency: str | None = None,
        provider: str | None = None,
        external_ref: Callable[[Any], str | None] | None = None,
        validate: Callable[..., object] | None = None,
        wait_in_flight: float | None = None,
        dispatch: Literal["auto"] = "auto",
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    @overload
    def tool(
        self,
        *,
        action: str,
        op_key: str | KeyMaker,
        target: str | KeyMaker,
        params: Callable[..., Mapping[str, Any]] | None = None,
        normalise: Mapping[str, Sequence[str] | str] | None = None,
        amount_minor: str | None = None,
        currency: str | None = None,
        provider: str | None = None,
        external_ref: Callable[[Any], str | None] | None = None,
        validate: Callable[..., object] | None = None,
        wait_in_flight: float | None = None,
        dispatch: Literal["manual"],
    ) -> Callable[[Callable[Concatenate[Effect, P], R]], Callable[P, R]]: ...

    def tool(
        self,
        *,
        action: str,
        op_key: str | KeyMaker,
        target: str | KeyMaker,
        params: Callable[..., Mapping[str, Any]] | None = None,
        normalise: Mapping[str, Sequence[str] | str] | None = None,
        amount_minor: str | None = None,
        currency: str | None = None,
        provider: str | None = None,
        external_ref: Callable[[Any], str | None] | None = None,
        validate: Callable[..., object] | None = None,
        wait_in_flight: float | None = None,
        dispatch: Literal["auto", "manual"] = "auto",
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Wraps a provider call: its key and target come from the call's
        business arguments through the templates (`"refund:{order_id}"`),
        filled with each value's key form, so one action written two ways
        (`1500`, `1500.0`, `"01500"`) is one key (docs/contract.md, "One
        business action, one key"). `normalise` asks for normalisers per
        argument (`{"order_id": ("trim", "upper")}`: trim, lower, upper,
        nfc); `amount_minor` and `currency` name arguments, the amount a
        whole number of minor units, which the function receives as an
        integer (and normalised arguments normalised). Its params are the
        canonical arguments (or what `params(**arguments)` returns from
        them). An argument that cannot make the key raises `BadArgument`
        before the ledger is written. The result must be JSON: a replay
        returns it as stored. `op_key` and `target` may instead be functions
        of the canonical arguments (passed by keyword, those they name).

        Where the provider call starts: by default the effect is claimed
        (`dispatched()`) just before the function runs, so anything it raises
        may have happened (`unknown`). `validate`, called before that with
        the arguments as the function gets them, refuses a call by raising:
        recorded `failed`, retryable, the provider never called. Or, with `dispatch="manual"`, the function
        gets the effect as its first parameter (`effect: Effect`, not an
        argument of the call) and calls `effect.dispatched()` itself just
        before the provider call: what it raises before that is `failed`,
        retryable; after it, `unknown`. `wait_in_flight`: see
        `Ledger.effect`."""

        def decorate(function: Callable[..., R]) -> Callable[..., R]:
            intents = _core.ToolIntents(
                function,
                action=action,
                op_key=op_key,
                target=target,
                params=params,
                normalise=normalise,
                amount_minor=amount_minor,
                currency=currency,
                provider=provider,
                dispatch=dispatch,
                effect_type=Effect,
                other_type=_async_effect_type(),
            )

            @functools.wraps(function)
            def run(*args: Any, **kwargs: Any) -> R:
                intent, call = intents.of_call(args, kwargs)
                with Effect(
                    self, intent, wait_in_flight=wait_in_flight,
                    claim=self._one_round_trip and validate is None and intents.effect_parameter is None,
                ) as effect:
                    if not effect.replayed:
                        if validate is not None:
                            validate(*call.args, **call.kwargs)
                        if intents.effect_parameter is None:
                            effect.dispatched()
                        value = intents.invoke(function, call, effect)
                        if effect.completed:  # the function recorded its outcome itself
                            return cast(R, value)
                        effect.succeeded(external_ref(value) if external_ref else None, value)
                return cast(R, effect.result)

            intents.present(run, function)
            self._intents[run] = intents
            return run

        return decorate

    def intent_of(self, tool: Callable[..., Any], **arguments: Any) -> Intent:
        """The effect a call of `tool` (decorated by this ledger's `tool`)
        with these keyword arguments is: its key, target and params, made
        from the canonical arguments as the call would make them. A wrapper
        of such a tool (made with `functools.wraps`) is followed to it."""
        return _core.registered(self._intents, tool).of_keywords(arguments)


def _async_effect_type() -> type:
    from .aio import AsyncEffect  # each of the two modules imports the other late

    return AsyncEffect


class Heartbeats:
    """The beats of one provider call in progress, whose claim started its
    lease: one every third of the lease, the first a third of a lease after
    the claim (a call shorter than that sends none), each one statement
    sent by the ledger's `Metronome`. `lease` is the lease in force, as the
    claim answered it, then as each beat answers it (the action's policy
    may set it): a beat answered another goes by it from the next beat.
    Nothing a beat meets is raised into the call: a beat that fails is
    logged and tried again at the next tick; one told the call is no
    longer in flight is the last (logged once if the ledger declared the
    call lost, silent if it was completed)."""

    def __init__(self, metronome: Metronome, op_key: str, lease: float, due: float) -> None:
        self.op_key = op_key
        self.lease = lease
        self._metronome = metronome
        self._due = due  # when the next beat is due (time.monotonic)
        self._stopped = False
        self._in_flight = False

    def stop(self) -> None:
        """Stops the beats; returns once none is left in flight. With no
        beat in flight (the usual case) it sends nothing and waits for
        nothing."""
        self._metronome.stop(self)


class Metronome:
    """The one daemon thread that sends a ledger's heartbeats, for every
    provider call of it in progress, one statement at a time, each on one
    of the ledger's idle connections (else a new one), given back after.
    It sleeps until the earliest beat is due: starting and stopping a
    call's beats takes a lock, and sends nothing. Its thread starts with
    the first call that beats (in each process), and ends once no call has
    had beats due for a lease."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.pid = os.getpid()
        self._condition = threading.Condition()
        # (due, order, beats): the calls' next beats, earliest first; a
        # stopped call's entry is dropped when it comes up.
        self._due: list[tuple[float, int, Heartbeats]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf

    def start(self, op_key: str, lease: float, first_in: float | None = None) -> Heartbeats:
        """Beats every third of `lease`, the first `first_in` seconds from
        now (default: a third of `lease`)."""
        first = _core.beat_interval(lease) if first_in is None else first_in
        beats = Heartbeats(self, op_key, lease, time.monotonic() + first)
        with self._condition:
            self._schedule(beats)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="effectwatch heartbeats", daemon=True)
                self._thread.start()
        return beats

    def stop(self, beats: Heartbeats) -> None:
        with self._condition:
            beats._stopped = True
            while beats._in_flight:
                self._condition.wait()

    def _schedule(self, beats: Heartbeats) -> None:
        # Under the lock.
        heapq.heappush(self._due, (beats._due, next(self._order), beats))
        if beats._due < self._wakes_at:
            self._condition.notify_all()

    def _next(self) -> Heartbeats | None:
        """The call whose beat is due, marked in flight, once one is; None
        once none has been in flight for a lease (the thread then ends)."""
        with self._condition:
            idle_since: float | None = None
            while True:
                while self._due and self._due[0][2]._stopped:
                    heapq.heappop(self._due)
                now = time.monotonic()
                if not self._due:
                    lease = self.ledger.heartbeat_lease or 15.0
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= lease:
                        self._thread = None
                        self._wakes_at = math.inf
                        return None
                    self._wakes_at = math.inf
                    self._condition.wait(idle_since + lease - now)
                    continue
                idle_since = None
                due, _, beats = self._due[0]
                if due > now:
                    self._wakes_at = due
                    self._condition.wait(due - now)
                    continue
                heapq.heappop(self._due)
                beats._in_flight = True
                self._wakes_at = -math.inf  # busy: nobody need wake it
                return beats

    def _run(self) -> None:
        while (beats := self._next()) is not None:
            lease = beats.lease
            try:
                beat = self.ledger.heartbeat(beats.op_key, lease=lease)
                going_on = _core.beats_go_on(beats.op_key, beat)
                lease = _core.lease_told(beat, lease)
            except Exception as error:
                _core.beat_failed(beats.op_key, beats.lease, error)
                going_on = True
            with self._condition:
                beats._in_flight = False
                self._condition.notify_all()  # a stop waiting for this beat
                if going_on and not beats._stopped:
                    # The next tick from this one's by the lease in force it
                    # was answered (from the claim's, while that stays the
                    # same), ticks missed meanwhile skipped.
                    beats.lease = lease
                    now = time.monotonic()
                    while beats._due <= now:
                        beats._due += _core.beat_interval(beats.lease)
                    self._schedule(beats)


class Effect:
    """One effect in progress (see `Ledger.effect`)."""

    def __init__(
        self, ledger: Ledger, intent: Intent, *, wait_in_flight: float | None = None, claim: bool = False
    ) -> None:
        self.ledger = ledger
        # Claim the effect with its begin, one round trip: for a caller that
        # calls `dispatched()` right after (the decorator with nothing to
        # check first). That call then takes the claim the begin made.
        self._claim = claim
        self._claimed_with_begin: Dispatch | None = None
        self.intent = intent
        # This attempt's id, sent with its begin, dispatch and completion:
        # the intent's request_id, else one made for this call.
        self.attempt_id = intent.request_id or str(uuid.uuid4())
        self._sent = replace(intent, request_id=self.attempt_id)
        self.wait_in_flight = wait_in_flight
        self.begun: Begun | None = None
        self.result: Any = None
        self.replayed = False
        self._dispatched = False
        self._completed = False
        self._not_ours = False
        self._recorded: str | None = None  # the outcome this call recorded
        self._heartbeats: Heartbeats | None = None

    @property
    def completed(self) -> bool:
        """Whether this call recorded the effect's outcome."""
        return self._completed

    def _begin(self) -> Begun:
        begun = self.ledger.begin(self._sent, dispatch=self._claim, lease=self._claim)
        if not self.wait_in_flight or begun.decision != "in_flight":
            return begun
        deadline = time.monotonic() + self.wait_in_flight
        pause = _core.FIRST_PAUSE
        state = begun.state
        while _core.keeps_waiting(begun, state):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(pause, left))
            pause = min(pause * 2, _core.LAST_PAUSE)
            state = self.ledger.state_of(self.intent.op_key)
            if state != "pending":
                begun = self.ledger.begin(self._sent, dispatch=self._claim, lease=self._claim)
                state = begun.state
        return begun

    def __enter__(self) -> Effect:
        begun = self._begin()
        self.begun = begun
        if begun.decision == "replay":
            self.replayed = True
            self.result = begun.result
        elif begun.decision not in _core.MAY_RUN:
            raise _core.refusal_for(begun, self.intent)
        elif self._claim and (begun.dispatched or begun.refused):
            self._claimed_with_begin = Dispatch(
                begun.dispatched, begun.state or "", begun.refused, begun.lease_in_force
            )
        return self

    def dispatched(self) -> None:
        """Call it just before the provider call: claims the effect, and
        with heartbeats on starts its lease in the same statement (or takes
        the claim and lease its begin made); the beats follow from a third
        of a lease later until the outcome is recorded. Any exception after
        it records the outcome as unknown. Called twice, it raises `Misuse`
        and claims nothing more."""
        if self.replayed:
            raise _core.Replayed()
        if self._dispatched or self._completed:
            raise _core.dispatched_twice(self.intent.op_key)
        dispatch = self._claimed_with_begin
        self._claimed_with_begin = None
        if dispatch is None:
            dispatch = self.ledger.mark_dispatched(
                self.intent.op_key, target=self.intent.target, request_id=self.attempt_id, lease=True
            )
        if dispatch.refused or not dispatch.claimed:
            # Another caller or login holds the effect: it is theirs to complete.
            self._not_ours = True
        if dispatch.refused:
            raise LedgerRefused(dispatch.refused)
        if not dispatch.claimed:
            raise _core.refusal_for(Begun("in_flight", 0, dispatch.state, None), self.intent)
        self._dispatched = True
        # From here until its outcome is recorded the provider call is in
        # progress; its claim started the lease and answered the lease in
        # force (the action's policy's, or this ledger's), the first beat is
        # a third of it away. A claim read back after its reply was lost
        # does not say it: the first beat, sent at once, does.
        self._heartbeats = self.ledger._beats(self.intent.op_key, dispatch.lease_in_force)

    def succeeded(self, external_ref: str | None = None, result: Any = None) -> Completed:
        """Records the provider's success. Without `dispatched()` first it
        records `unknown` instead and raises `Misuse`; on a replay it
        records nothing and raises `Misuse`."""
        if self.replayed:
            raise _core.success_replayed(self.intent.op_key)
        if not self._dispatched and not self._completed:
            self._complete("unknown", reason=_core.UNCLAIMED_SUCCESS)
            raise _core.success_unclaimed(self.intent.op_key)
        completed = self._complete("succeeded", external_ref=external_ref, result=result)
        self.result = result
        return completed

    def _complete(self, outcome: str, **fields: Any) -> Completed:
        if self._heartbeats is not None:
            # Every way the call ends records it here; a beat sent after that
            # would be told the call is over. Stopping them sends nothing,
            # and waits only for a beat in flight, if one is.
            heartbeats, self._heartbeats = self._heartbeats, None
            heartbeats.stop()
        completed = self.ledger.complete(
            self.intent.op_key, target=self.intent.target, outcome=outcome, request_id=self.attempt_id, **fields
        )
        if completed.refused:
            raise LedgerRefused(completed.refused)
        self._completed = True
        self._recorded = outcome
        return completed

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool:
        seen = _core.ending(
            replayed=self.replayed,
            dispatched=self._dispatched,
            completed=self._completed,
            not_ours=self._not_ours,
            error=error,
        )
        if error is not None and not isinstance(error, _core.Replayed):
            _core.mark(error, _core.ended_with(self.intent.op_key, self._dispatched, seen, self._recorded))
        if seen is not None:
            self._complete(
                seen.outcome,
                error_class=seen.error_class,
                retryable=seen.retryable,
                reason=seen.reason,
                retry_after=seen.retry_after,
            )
        return isinstance(error, _core.Replayed)
