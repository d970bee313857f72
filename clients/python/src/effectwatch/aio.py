"""The asyncio client: `AsyncLedger.effect(...)` and `@AsyncLedger.tool(...)`,
the same surface as `effectwatch.Ledger`, awaited.

The synchronous client, `ledger.py`, is generated from this file by
`tools/async_to_sync.py` (run `python tools/async_to_sync.py` in
clients/python after changing this one): names map to their synchronous
twins, `await` and `async` go. What the two faces do differently by nature
is written by hand, in a module of each face's own for the heartbeats
(`_beats_aio.py`, `_beats.py`), and here in the `if True:  # ASYNC` blocks,
whose `else:` is what the synchronous face runs."""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
import uuid
import weakref
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Concatenate,
    Literal,
    Mapping,
    ParamSpec,
    Sequence,
    TypeVar,
    cast,
    overload,
)

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from . import _core
from ._beats_aio import AsyncHeartbeats, AsyncMetronome
from ._core import Beat, Begun, Completed, Dispatch, Intent
from ._keys import KeyMaker
from .errors import LedgerRefused, Misuse

P = ParamSpec("P")
R = TypeVar("R")

# The ledgers of this process, so that a forked child forgets their pools
# (`_forget_pools`, at the end), and in a child the pools it forgot: kept,
# never used nor closed there (psycopg closes none of a parent's connections
# in a child), so that not even their clean-up runs in it.
_LEDGERS: weakref.WeakSet[AsyncLedger] = weakref.WeakSet()
_PARENTS_POOLS: list[object] = []


class AsyncLedger:
    """A writer of the effect ledger. Each call is one short autocommit
    statement: no transaction stays open across the provider call, and a
    connection is held for the statement only, taken from a psycopg_pool
    pool: the one the ledger makes on `conninfo` (at most `max_connections`,
    default 10, opened as calls need them and kept idle between calls:
    opening one costs more than the call itself; `close()` closes it), or
    the one the caller passes (`pool=`), used as it is. Statements are
    never prepared, whatever the pool's connections say, so the ledger may
    sit behind PgBouncer in transaction mode, where an idle client holds no
    server connection. `statement_timeout_ms` (default: none) bounds each
    statement: the ledger's own connections start with it (PgBouncer
    refuses that: set it on the login role there); on a pool passed to it,
    each call is a transaction of its own that sets it first (`set local`),
    which PgBouncer takes. A forked child makes a pool of its own rather
    than talk on its parent's connections; a ledger on a pool it was given
    refuses to go on in a forked child (`Misuse`).

    A call whose connection is lost is sent again, a few times, on a new
    connection; a call sent again recognises what its first send did for
    the same request id (README, "A lost reply"); a completion, which
    carries the provider's answer, is sent again with backoff for up to
    `completion_retry_for` seconds (0: as any other call), each try said at
    warning on the `effectwatch` logger. A provider call's claim starts its
    lease of `heartbeat_lease` seconds (1 to 3600; None: no lease, no
    heartbeats), in the same statement, and while the call runs it is
    beaten for every third of the lease, the first a third of a lease after
    the claim, so that a worker that dies mid-call is unknown once its lease
    runs out (README, "Heartbeats"): from one thread of the ledger's, or on
    the asyncio ledger from timers and tasks on the caller's event loop.
    The action's policy may set the lease instead: the beats go by the
    lease the ledger answers. An asyncio ledger serves one event loop."""

    # psycopg's `prepare` for every statement: False, never prepared, on any
    # pool (PgBouncer's transaction mode); the PgBouncer tests turn it off.
    _prepare: bool | None = False

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        requested_by: str,
        pool: AsyncConnectionPool[Any] | None = None,
        application_name: str | None = None,
        statement_timeout_ms: int | None = None,
        max_connections: int | None = None,
        heartbeat_lease: float | None = 15.0,
        completion_retry_for: float = 30.0,
    ) -> None:
        self.conninfo = conninfo
        self.requested_by = requested_by
        self.application_name, self.max_connections = _core.pool_settings(
            conninfo, pool, application_name, max_connections
        )
        self.statement_timeout_ms = _core.statement_timeout(statement_timeout_ms)
        self.heartbeat_lease = _core.heartbeat_lease(heartbeat_lease)
        self.completion_retry_for = _core.completion_retry_for(completion_retry_for)
        # The pool the statements take their connections from: the caller's,
        # or the ledger's own, opened by its first call (and made anew in a
        # forked child).
        self._made = pool is None
        self.pool: AsyncConnectionPool[Any] = self._new_pool() if pool is None else pool
        self._opened = False
        self._forked_from: int | None = None
        # On a pool passed to it, what begins each call's transaction and
        # sets the statement timeout there (None: one autocommit statement).
        self._set_local = None if pool is None else _core.set_local(self.statement_timeout_ms)
        # What each tool this ledger decorated makes of its arguments.
        self._intents: dict[Callable[..., Any], _core.ToolIntents] = {}
        # Whether a decorated tool with nothing to check first begins and
        # claims its effect in one round trip (False: two, as before; the
        # bench compares them).
        self._one_round_trip = True
        # What sends its provider calls' beats, as this face does (its own
        # module, written by hand).
        self._metronome = AsyncMetronome(self)
        _LEDGERS.add(self)

    def _connection_kwargs(self) -> dict[str, Any]:
        """How the ledger's own connections are made: autocommit, never
        prepared, named, with the statement timeout from their start."""
        return {
            "autocommit": True,
            "prepare_threshold": None,
            "row_factory": dict_row,
            "application_name": self.application_name,
            "options": _core.startup_options(self.statement_timeout_ms),
        }

    def _new_pool(self) -> AsyncConnectionPool[Any]:
        return AsyncConnectionPool(
            self.conninfo or "",
            kwargs=self._connection_kwargs(),
            min_size=0,
            max_size=self.max_connections,
            timeout=_core.POOL_WAIT,
            reconnect_timeout=_core.POOL_WAIT,
            open=False,
            name="effectwatch",
        )

    def _forked(self) -> None:
        """In a forked child, before it runs anything else: the parent's
        connections are not the child's to talk on (its statements would
        interleave with the parent's on one server session)."""
        if self._made:
            _PARENTS_POOLS.append(self.pool)
            self.pool = self._new_pool()
            self._opened = False
        else:
            self._forked_from = os.getppid()

    async def _pool_now(self) -> AsyncConnectionPool[Any]:
        if self._forked_from is not None:
            raise Misuse(
                f"this ledger was given its pool in process {self._forked_from}, and this process is a fork of "
                "it: its connections are the parent's. Make the child a ledger on a pool of its own"
            )
        if self._made and not self._opened:
            await self.pool.open()
            self._opened = True
        return self.pool

    async def close(self) -> None:
        """Closes the pool the ledger made; its calls from then on raise
        `psycopg_pool.PoolClosed`. A pool passed to it is left open: it is
        the caller's to close."""
        if self._made:
            self._opened = True  # not to be opened again
            await self.pool.close()

    @asynccontextmanager
    async def _connection(self, *, fresh: bool = False) -> AsyncIterator[AsyncConnection[Any]]:
        """A connection of the pool, given back after one statement. `fresh`,
        for a call sent again after its connection was lost, when the pool's
        others may be gone too (the server restarted, or failed over): on
        the ledger's own pool, a new connection, closed after it; on a pool
        passed to it, one of the pool's once it has checked them (`check()`
        drops those that are broken)."""
        pool = await self._pool_now()
        if fresh and self._made:
            async with await AsyncConnection.connect(self.conninfo or "", **self._connection_kwargs()) as connection:
                yield connection
            return
        if fresh:
            await pool.check()
        async with pool.connection() as connection:
            if connection.autocommit:
                yield connection
                return
            # A connection of the caller's that is not autocommit: for this
            # statement it is (no BEGIN first), then as it was.
            await connection.set_autocommit(True)
            try:
                yield connection
            finally:
                if not (connection.closed or connection.broken):
                    with suppress(Exception):
                        await connection.set_autocommit(False)

    async def _run(self, connection: AsyncConnection[Any], sql: str, args: Mapping[str, Any]) -> dict[str, Any] | None:
        """One statement and its row. On a pool passed to the ledger with a
        statement timeout, in a transaction of its own that sets it first:
        `begin; set local statement_timeout = N` (one round trip), the
        statement, `commit`."""
        cursor = connection.cursor(row_factory=dict_row)
        if self._set_local is None:
            await cursor.execute(sql, args, prepare=self._prepare)
            return await cursor.fetchone()
        await cursor.execute(self._set_local, prepare=False)
        try:
            await cursor.execute(sql, args, prepare=self._prepare)
            row = await cursor.fetchone()
        except BaseException:
            if not (connection.closed or connection.broken):
                with suppress(Exception):
                    await connection.execute("rollback", prepare=False)
            raise
        await connection.execute("commit", prepare=False)
        return row

    async def _one(self, sql: str, args: Mapping[str, Any], *, fresh: bool = False) -> dict[str, Any] | None:
        async with self._connection(fresh=fresh) as connection:
            return await self._run(connection, sql, args)

    async def _call(
        self,
        sql: str,
        args: Mapping[str, Any],
        *,
        instead: Callable[[], Awaitable[dict[str, Any] | None]] | None = None,
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
        row, _ = await self._call(_core.OWN_SQL, {"op_key": op_key})
        return row

    # The three SQL calls, answered as they are; a call sent again after its
    # reply was lost recognises what its first send did for the same
    # request id (README, "A lost reply").

    async def begin(self, intent: Intent, *, dispatch: bool = False, lease: bool = False) -> Begun:
        """begin_effect and, with `dispatch` when it answers proceed or
        retry, mark_dispatched, in one round trip (`Begun.dispatched`: this
        call claimed the effect). With `lease` (and heartbeats on), the
        claim starts the call's heartbeat lease: the caller then beats for
        it (`beat_for`) until its completion, or the effect is unknown
        once the lease runs out. Without it, the claim holds no lease and
        keeps the pending window's rule."""

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
        """Claims the effect for its provider call. With `lease` (and
        heartbeats on), the claim starts the call's heartbeat lease, as
        with `begin`."""

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
        if again and not dispatch.claimed and not dispatch.refused:
            if _core.own_claim(await self._own(op_key), request_id):
                return Dispatch(True, "pending", None)
        return dispatch

    async def complete(self, op_key: str, *, target: str, outcome: str, **fields: Any) -> Completed:
        """complete_effect: records the provider call's outcome (`fields`:
        external_ref, result, retryable, reason, error_class, retry_after,
        request_id)."""
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
        """One beat: the worker running `op_key`'s provider call is alive,
        and its lease runs `lease` seconds (default: `heartbeat_lease`)
        from now, or the lease the action's policy sets, which the answer
        says (`Beat.lease_in_force`). Never sent again on a lost
        connection: the next beat is its retry."""
        args = _core.heartbeat_args(op_key, _core.lease_of(lease, self.heartbeat_lease), self.requested_by)
        return _core.beat_of(await self._one(_core.HEARTBEAT_SQL, args))

    def beat_for(self, op_key: str, lease: float | None = None) -> AsyncHeartbeats | None:
        """Heartbeats for `op_key`'s provider call, claimed just now with
        its lease (`lease=True`), until they are stopped: the first a third
        of a lease from now, then one every third of a lease, off the
        caller's path. `lease`: the lease in force its claim answered
        (`Begun.lease_in_force`, `Dispatch.lease_in_force`: the action's
        policy may set one), else `heartbeat_lease`; from each beat on, the
        lease in force it is answered. None when heartbeats are off."""
        if self.heartbeat_lease is None:
            return None
        return self._beats(op_key, lease if lease is not None else self.heartbeat_lease)

    def _beats(self, op_key: str, lease: float | None) -> AsyncHeartbeats | None:
        """The beats of a call claimed with its lease: `lease`, the lease in
        force its claim answered. None (not known: a claim whose reply was
        lost, read back) sends the first beat at once, by `heartbeat_lease`,
        and its answer tells the lease in force."""
        if self.heartbeat_lease is None:
            return None
        if lease is None:
            return self._metronome.start(op_key, self.heartbeat_lease, first_in=0.0)
        return self._metronome.start(op_key, lease)

    def _lease_if(self, lease: bool) -> float | None:
        """The lease a claim starts, in seconds: none unless asked for, and
        none with heartbeats off."""
        return self.heartbeat_lease if lease else None

    async def state_of(self, op_key: str) -> str | None:
        """The key's state as the ledger has it now (None: no such effect)."""
        row, _ = await self._call(_core.STATE_SQL, {"op_key": op_key})
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
    ) -> AsyncEffect:
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
        the arguments as the function gets them (on the asyncio ledger, a
        coroutine function too), refuses a call by raising: recorded
        `failed`, retryable, the provider never called. Or, with
        `dispatch="manual"`, the function gets the effect as its first
        parameter (`effect: AsyncEffect`, not an argument of the call) and
        calls `effect.dispatched()` itself (awaited, on the asyncio ledger)
        just before the provider call: what it raises before that is
        `failed`, retryable; after it, `unknown`. `wait_in_flight`: see
        `AsyncLedger.effect`."""

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
                other_type=_core.other_effect_type(AsyncEffect),
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
                            if True:  # ASYNC
                                checked = validate(*call.args, **call.kwargs)
                                if inspect.isawaitable(checked):
                                    await checked
                            else:
                                validate(*call.args, **call.kwargs)
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
        """The effect a call of `tool` (decorated by this ledger's `tool`)
        with these keyword arguments is: its key, target and params, made
        from the canonical arguments as the call would make them. A wrapper
        of such a tool (made with `functools.wraps`) is followed to it."""
        return _core.registered(self._intents, tool).of_keywords(arguments)


class AsyncEffect:
    """One effect in progress (see `AsyncLedger.effect`)."""

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
        # From here until its outcome is recorded the provider call is in
        # progress; its claim started the lease and answered the lease in
        # force (the action's policy's, or this ledger's), the first beat is
        # a third of it away. A claim read back after its reply was lost
        # does not say it: the first beat, sent at once, does.
        self._heartbeats = self.ledger._beats(self.intent.op_key, dispatch.lease_in_force)

    async def succeeded(self, external_ref: str | None = None, result: Any = None) -> Completed:
        """Records the provider's success. Without `dispatched()` first it
        records `unknown` instead and raises `Misuse`; on a replay it
        records nothing and raises `Misuse`."""
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
            # Every way the call ends records it here; a beat sent after that
            # would be told the call is over. Stopping them sends nothing,
            # and waits only for a beat in flight, if one is.
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


def _forget_pools() -> None:
    """Run in a forked child before anything else: each ledger of the
    parent's makes a pool of its own, or refuses to go on (`_forked`)."""
    for ledger in list(_LEDGERS):
        ledger._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)
