"""The asyncio client: the same surface as `effectwatch.Ledger`, awaited."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import uuid
from dataclasses import replace
from types import TracebackType
from typing import Any, Awaitable, Callable, Concatenate, Literal, Mapping, ParamSpec, Sequence, TypeVar, cast, overload

import psycopg
from psycopg.rows import dict_row

from . import _core
from ._core import Beat, Begun, Completed, Dispatch, Intent
from ._keys import KeyMaker
from .errors import LedgerRefused

P = ParamSpec("P")
R = TypeVar("R")


class AsyncLedger:
    """See `effectwatch.Ledger`: one short autocommit transaction per call,
    a few connections kept idle between calls, no prepared statements; a
    claim starts its call's heartbeat lease, and the beats while the call
    runs are timers and tasks on the caller's event loop. Use one per
    event loop."""

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
        self._idle: list[psycopg.AsyncConnection[dict[str, Any]]] = []
        # What each tool this ledger decorated makes of its arguments.
        self._intents: dict[Callable[..., Any], _core.ToolIntents] = {}
        # Whether a decorated tool with nothing to check first begins and
        # claims its effect in one round trip (False: two, as before; the
        # bench compares them).
        self._one_round_trip = True

    def _options(self) -> str | None:
        # See Ledger._options: PgBouncer refuses the `options` startup parameter.
        if self.statement_timeout_ms is None:
            return None
        return f"-c statement_timeout={self.statement_timeout_ms}"

    async def _connect(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        return await psycopg.AsyncConnection.connect(
            self.conninfo,
            autocommit=True,
            prepare_threshold=None,
            row_factory=dict_row,
            application_name=self.application_name,
            options=self._options(),
        )

    async def _checkout(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        # One event loop, no await between the check and the pop: no lock.
        while self._idle:
            connection = self._idle.pop()
            if not (connection.closed or connection.broken):
                return connection
        return await self._connect()

    async def _checkin(self, connection: psycopg.AsyncConnection[dict[str, Any]]) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(connection)
        else:
            await connection.close()

    async def _one(self, sql: str, args: Mapping[str, Any], *, fresh: bool = False) -> dict[str, Any] | None:
        connection = await (self._connect() if fresh else self._checkout())
        try:
            cursor = await connection.execute(sql, args)
            row = await cursor.fetchone()
        except BaseException:
            await connection.close()
            raise
        await self._checkin(connection)
        return row

    async def _call(
        self,
        sql: str,
        args: Mapping[str, Any],
        *,
        instead: Callable[[], Awaitable[dict[str, Any] | None]] | None = None,
        completing: str | None = None,
    ) -> tuple[dict[str, Any] | None, bool]:
        """See `effectwatch.Ledger._call`."""
        resends = _core.Resends(completing, self.completion_retry_for)
        again = False
        while True:
            try:
                if again and instead is not None:
                    answered = await instead()
                    if answered is not None:
                        return answered, True
                return await self._one(sql, args, fresh=again), again
            except Exception as error:
                if not _core.connection_lost(error):
                    raise
                pause = resends.pause(error)
                if pause is None:
                    raise
            await asyncio.sleep(pause)
            again = True

    async def _own(self, op_key: str) -> dict[str, Any] | None:
        return (await self._call(_core.OWN_SQL, {"op_key": op_key}))[0]

    # See `effectwatch.Ledger`: a call sent again after its reply was lost
    # recognises what its first send did for the same request id.

    async def begin(self, intent: Intent, *, dispatch: bool = False, lease: bool = False) -> Begun:
        """See `effectwatch.Ledger.begin`: with `lease` (and heartbeats on),
        the claim starts the call's heartbeat lease (`beat_for`)."""

        async def begun_before() -> dict[str, Any] | None:
            own = await self._one(_core.OWN_SQL, {"op_key": intent.op_key}, fresh=True)
            before = _core.begun_before(own, intent.request_id, dispatch)
            if before is None:
                return None
            return {"decision": before.decision, "effect_id": before.effect_id, "state": before.state,
                    "result": None, "dispatched": before.dispatched, "refused": None, "differences": None}

        row, again = await self._call(
            _core.BEGIN_SQL,
            intent.begin_args(self.requested_by, dispatch=dispatch, lease=self._lease_if(lease)),
            instead=begun_before,
        )
        assert row is not None
        begun = _core.begun_of(row)
        if again and begun.decision == "in_flight":
            # The first send may have committed after the read: in flight,
            # by this attempt's own begin (and claim).
            before = _core.begun_before(await self._own(intent.op_key), intent.request_id, dispatch)
            if before is not None:
                return before
        return begun

    async def mark_dispatched(
        self, op_key: str, *, target: str, request_id: str | None = None, lease: bool = False
    ) -> Dispatch:
        """See `effectwatch.Ledger.mark_dispatched`."""

        async def claimed_before() -> dict[str, Any] | None:
            own = await self._one(_core.OWN_SQL, {"op_key": op_key}, fresh=True)
            if not _core.own_claim(own, request_id):
                return None
            return {"claimed": True, "state": "pending", "refused": None}

        row, again = await self._call(
            _core.DISPATCH_SQL,
            _core.dispatch_args(op_key, target, request_id, self.requested_by, self._lease_if(lease)),
            instead=claimed_before,
        )
        assert row is not None
        dispatch = Dispatch(row["claimed"], row["state"], row["refused"], row.get("lease_in_force"))
        if (
            again
            and not dispatch.claimed
            and not dispatch.refused
            and _core.own_claim(await self._own(op_key), request_id)
        ):
            return Dispatch(True, "pending", None)
        return dispatch

    async def complete(self, op_key: str, *, target: str, outcome: str, **fields: Any) -> Completed:
        args = _core.complete_args(op_key, target, outcome, self.requested_by, **fields)

        async def recorded_and_moved_on() -> dict[str, Any] | None:
            own = await self._one(_core.OWN_SQL, {"op_key": op_key}, fresh=True)
            if own is None or not _core.moved_on(own, args["request_id"]):
                return None
            return {"applied": False, "state": own["state"], "late": False, "refused": None}

        row, _ = await self._call(_core.COMPLETE_SQL, args, instead=recorded_and_moved_on, completing=op_key)
        assert row is not None
        return Completed(row["applied"], row["state"], row["late"], row["refused"])

    async def heartbeat(self, op_key: str, *, lease: float | None = None) -> Beat:
        """See `effectwatch.Ledger.heartbeat`."""
        args = _core.heartbeat_args(op_key, _core.lease_of(lease, self.heartbeat_lease), self.requested_by)
        return _core.beat_of(await self._one(_core.HEARTBEAT_SQL, args))

    def beat_for(self, op_key: str, lease: float | None = None) -> AsyncHeartbeats | None:
        """See `effectwatch.Ledger.beat_for`: on the running event loop."""
        if self.heartbeat_lease is None:
            return None
        return self._beats(op_key, lease if lease is not None else self.heartbeat_lease)

    def _beats(self, op_key: str, lease: float | None) -> AsyncHeartbeats | None:
        """See `effectwatch.Ledger._beats`: a lease not known (None) sends
        the first beat at once, whose answer tells it."""
        if self.heartbeat_lease is None:
            return None
        if lease is None:
            return AsyncHeartbeats(self, op_key, self.heartbeat_lease, first_in=0.0)
        return AsyncHeartbeats(self, op_key, lease)

    def _lease_if(self, lease: bool) -> float | None:
        return self.heartbeat_lease if lease else None

    async def state_of(self, op_key: str) -> str | None:
        """See `effectwatch.Ledger.state_of`."""
        row = (await self._call(_core.STATE_SQL, {"op_key": op_key}))[0]
        return None if row is None else str(row["state"])

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
    ) -> AsyncEffect:
        """See `effectwatch.Ledger.effect`."""
        intent = _core.effect_intent(op_key, action, target, params, amount_minor, currency, provider, request_id)
        return AsyncEffect(self, intent, wait_in_flight=wait_in_flight)

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
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]: ...

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
    ) -> Callable[[Callable[Concatenate[AsyncEffect, P], Awaitable[R]]], Callable[P, Awaitable[R]]]: ...

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
        """See `effectwatch.Ledger.tool`. `validate` may be a coroutine
        function; with `dispatch="manual"` the function takes its
        `AsyncEffect` first and awaits `effect.dispatched()`."""

        def decorate(function: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
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
                effect_type=AsyncEffect,
                other_type=_sync_effect_type(),
            )

            @functools.wraps(function)
            async def run(*args: Any, **kwargs: Any) -> R:
                intent, call = intents.of_call(args, kwargs)
                async with AsyncEffect(
                    self, intent, wait_in_flight=wait_in_flight,
                    claim=self._one_round_trip and validate is None and intents.effect_parameter is None,
                ) as effect:
                    if not effect.replayed:
                        if validate is not None:
                            checked = validate(*call.args, **call.kwargs)
                            if inspect.isawaitable(checked):
                                await checked
                        if intents.effect_parameter is None:
                            await effect.dispatched()
                        value = await cast(Awaitable[R], intents.invoke(function, call, effect))
                        if effect.completed:  # the function recorded its outcome itself
                            return value
                        await effect.succeeded(external_ref(value) if external_ref else None, value)
                return cast(R, effect.result)

            intents.present(run, function)
            self._intents[run] = intents
            return run

        return decorate

    def intent_of(self, tool: Callable[..., Any], **arguments: Any) -> Intent:
        """See `effectwatch.Ledger.intent_of`."""
        return _core.registered(self._intents, tool).of_keywords(arguments)


def _sync_effect_type() -> type:
    from .ledger import Effect  # each of the two modules imports the other late

    return Effect


class AsyncHeartbeats:
    """See `effectwatch.ledger.Heartbeats`: the beats of one provider call
    in progress, whose claim started its lease, on the caller's event loop
    (a call that blocks the loop holds its beats up too). Between beats,
    only a timer: a beat is a task of its own, one statement on one of the
    ledger's connections, made when it is due. `lease` is the lease in
    force, as the claim answered it, then as each beat answers it."""

    def __init__(self, ledger: AsyncLedger, op_key: str, lease: float, first_in: float | None = None) -> None:
        self.ledger = ledger
        self.op_key = op_key
        self.lease = lease
        self._loop = asyncio.get_running_loop()
        self._stopped = False
        self._in_flight: asyncio.Task[None] | None = None
        self._due = self._loop.time() + (_core.beat_interval(lease) if first_in is None else first_in)
        self._timer: asyncio.TimerHandle | None = self._loop.call_at(self._due, self._tick)

    async def stop(self) -> None:
        """Stops the beats; returns once none is left in flight. With no
        beat in flight (the usual case) it sends nothing and waits for
        nothing. Cancelled while it waits, it cancels the beat too: none
        outlives its call."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._in_flight is not None:
            await self._in_flight

    def _tick(self) -> None:
        self._timer = None
        self._in_flight = self._loop.create_task(self._beat(), name=f"effectwatch heartbeat: {self.op_key}")

    async def _beat(self) -> None:
        if self._stopped:  # stopped between its tick and its start: not sent
            self._in_flight = None
            return
        lease = self.lease
        try:
            try:
                beat = await self.ledger.heartbeat(self.op_key, lease=lease)
                going_on = _core.beats_go_on(self.op_key, beat)
                lease = _core.lease_told(beat, lease)
            except Exception as error:
                _core.beat_failed(self.op_key, self.lease, error)
                going_on = True
        finally:
            self._in_flight = None
        if going_on and not self._stopped:
            # The next tick from this one's by the lease in force it was
            # answered (from the claim's, while that stays the same), ticks
            # missed meanwhile skipped.
            self.lease = lease
            now = self._loop.time()
            while self._due <= now:
                self._due += _core.beat_interval(self.lease)
            self._timer = self._loop.call_at(self._due, self._tick)


class AsyncEffect:
    """One effect in progress (see `effectwatch.Effect`)."""

    def __init__(
        self, ledger: AsyncLedger, intent: Intent, *, wait_in_flight: float | None = None, claim: bool = False
    ) -> None:
        self.ledger = ledger
        # Claim the effect with its begin, one round trip: for a caller that
        # calls `dispatched()` right after (the decorator with nothing to
        # check first). That call then takes the claim the begin made.
        self._claim = claim
        self._claimed_with_begin: Dispatch | None = None
        self.intent = intent
        # See `effectwatch.Effect`: this attempt's id, sent with each call.
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
        self._heartbeats: AsyncHeartbeats | None = None

    @property
    def completed(self) -> bool:
        """Whether this call recorded the effect's outcome."""
        return self._completed

    async def _begin(self) -> Begun:
        begun = await self.ledger.begin(self._sent, dispatch=self._claim, lease=self._claim)
        if not self.wait_in_flight or begun.decision != "in_flight":
            return begun
        deadline = time.monotonic() + self.wait_in_flight
        pause = _core.FIRST_PAUSE
        state = begun.state
        while _core.keeps_waiting(begun, state):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _core.LAST_PAUSE)
            state = await self.ledger.state_of(self.intent.op_key)
            if state != "pending":
                begun = await self.ledger.begin(self._sent, dispatch=self._claim, lease=self._claim)
                state = begun.state
        return begun

    async def __aenter__(self) -> AsyncEffect:
        begun = await self._begin()
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

    async def dispatched(self) -> None:
        if self.replayed:
            raise _core.Replayed()
        if self._dispatched or self._completed:
            raise _core.dispatched_twice(self.intent.op_key)
        dispatch = self._claimed_with_begin
        self._claimed_with_begin = None
        if dispatch is None:
            dispatch = await self.ledger.mark_dispatched(
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
        # See `effectwatch.Effect.dispatched`: the claim started the lease,
        # and answered the lease in force the beats go by.
        self._heartbeats = self.ledger._beats(self.intent.op_key, dispatch.lease_in_force)

    async def succeeded(self, external_ref: str | None = None, result: Any = None) -> Completed:
        if self.replayed:
            raise _core.success_replayed(self.intent.op_key)
        if not self._dispatched and not self._completed:
            await self._complete("unknown", reason=_core.UNCLAIMED_SUCCESS)
            raise _core.success_unclaimed(self.intent.op_key)
        completed = await self._complete("succeeded", external_ref=external_ref, result=result)
        self.result = result
        return completed

    async def _complete(self, outcome: str, **fields: Any) -> Completed:
        if self._heartbeats is not None:
            # See `effectwatch.Effect._complete`: every way the call ends
            # records it here; stopping the beats sends nothing, and waits
            # only for a beat in flight.
            heartbeats, self._heartbeats = self._heartbeats, None
            await heartbeats.stop()
        completed = await self.ledger.complete(
            self.intent.op_key, target=self.intent.target, outcome=outcome, request_id=self.attempt_id, **fields
        )
        if completed.refused:
            raise LedgerRefused(completed.refused)
        self._completed = True
        self._recorded = outcome
        return completed

    async def __aexit__(
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
            await self._complete(
                seen.outcome,
                error_class=seen.error_class,
                retryable=seen.retryable,
                reason=seen.reason,
                retry_after=seen.retry_after,
            )
        return isinstance(error, _core.Replayed)
