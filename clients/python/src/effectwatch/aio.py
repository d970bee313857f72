"""The asyncio client: the same surface as `effectwatch.Ledger`, awaited."""

from __future__ import annotations

import functools
from types import TracebackType
from typing import Any, Awaitable, Callable, Mapping, ParamSpec, Sequence, TypeVar, cast

import psycopg
from psycopg.rows import dict_row

from . import _core
from ._core import Begun, Completed, Dispatch, Intent
from .errors import LedgerRefused

P = ParamSpec("P")
R = TypeVar("R")


class AsyncLedger:
    """See `effectwatch.Ledger`: one short autocommit transaction per call,
    a few connections kept idle between calls, no prepared statements.
    Use one per event loop."""

    def __init__(
        self,
        conninfo: str,
        *,
        requested_by: str,
        application_name: str = "effectwatch-python",
        statement_timeout_ms: int | None = None,
        max_idle: int = 4,
    ) -> None:
        self.conninfo = conninfo
        self.requested_by = requested_by
        self.application_name = application_name
        self.statement_timeout_ms = statement_timeout_ms
        self.max_idle = max_idle
        self._idle: list[psycopg.AsyncConnection[dict[str, Any]]] = []
        # What each tool this ledger decorated makes of its arguments.
        self._intents: dict[Callable[..., Any], _core.ToolIntents] = {}

    def _options(self) -> str | None:
        # See Ledger._options: PgBouncer refuses the `options` startup parameter.
        if self.statement_timeout_ms is None:
            return None
        return f"-c statement_timeout={self.statement_timeout_ms}"

    async def _checkout(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        # One event loop, no await between the check and the pop: no lock.
        while self._idle:
            connection = self._idle.pop()
            if not (connection.closed or connection.broken):
                return connection
        return await psycopg.AsyncConnection.connect(
            self.conninfo,
            autocommit=True,
            prepare_threshold=None,
            row_factory=dict_row,
            application_name=self.application_name,
            options=self._options(),
        )

    async def _one(self, sql: str, args: Mapping[str, Any]) -> dict[str, Any] | None:
        connection = await self._checkout()
        try:
            cursor = await connection.execute(sql, args)
            row = await cursor.fetchone()
        except BaseException:
            await connection.close()
            raise
        if len(self._idle) < self.max_idle:
            self._idle.append(connection)
        else:
            await connection.close()
        return row

    async def begin(self, intent: Intent) -> Begun:
        row = await self._one(_core.BEGIN_SQL, intent.begin_args(self.requested_by))
        assert row is not None
        return Begun(row["decision"], row["effect_id"], row["state"], row["result"])

    async def mark_dispatched(self, op_key: str, *, target: str, request_id: str | None = None) -> Dispatch:
        row = await self._one(
            _core.DISPATCH_SQL,
            {"op_key": op_key, "target": target, "request_id": request_id, "worker": self.requested_by},
        )
        assert row is not None
        return Dispatch(row["claimed"], row["state"], row["refused"])

    async def complete(self, op_key: str, *, target: str, outcome: str, **fields: Any) -> Completed:
        row = await self._one(
            _core.COMPLETE_SQL, _core.complete_args(op_key, target, outcome, self.requested_by, **fields)
        )
        assert row is not None
        return Completed(row["applied"], row["state"], row["late"], row["refused"])

    async def recorded(self, op_key: str) -> dict[str, Any] | None:
        return await self._one(_core.RECORDED_SQL, {"op_key": op_key})

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
    ) -> AsyncEffect:
        intent = _core.effect_intent(op_key, action, target, params, amount_minor, currency, provider, request_id)
        return AsyncEffect(self, intent)

    def tool(
        self,
        *,
        action: str,
        op_key: str,
        target: str,
        params: Callable[..., Mapping[str, Any]] | None = None,
        normalise: Mapping[str, Sequence[str] | str] | None = None,
        amount_minor: str | None = None,
        currency: str | None = None,
        provider: str | None = None,
        external_ref: Callable[[Any], str | None] | None = None,
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """See `effectwatch.Ledger.tool`."""

        def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
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
            )

            @functools.wraps(function)
            async def run(*args: P.args, **kwargs: P.kwargs) -> R:
                intent, call = intents.of_call(args, kwargs)
                async with AsyncEffect(self, intent) as effect:
                    await effect.dispatched()
                    value = await cast(Callable[..., Awaitable[R]], function)(*call.args, **call.kwargs)
                    await effect.succeeded(external_ref(value) if external_ref else None, value)
                return cast(R, effect.result)

            self._intents[run] = intents
            return run

        return decorate

    def intent_of(self, tool: Callable[..., Any], **arguments: Any) -> Intent:
        """See `effectwatch.Ledger.intent_of`."""
        intents = self._intents.get(tool)
        if intents is None:
            raise ValueError(f"{getattr(tool, '__name__', tool)!r} is not a tool this ledger decorated")
        return intents.of_keywords(arguments)


class AsyncEffect:
    """One effect in progress (see `effectwatch.Effect`)."""

    def __init__(self, ledger: AsyncLedger, intent: Intent) -> None:
        self.ledger = ledger
        self.intent = intent
        self.begun: Begun | None = None
        self.result: Any = None
        self.replayed = False
        self._dispatched = False
        self._completed = False
        self._not_ours = False

    async def __aenter__(self) -> AsyncEffect:
        begun = await self.ledger.begin(self.intent)
        self.begun = begun
        if begun.decision == "replay":
            self.replayed = True
            self.result = begun.result
        elif begun.decision not in _core.MAY_RUN:
            recorded = await self.ledger.recorded(self.intent.op_key) if begun.decision == "rejected" else None
            raise _core.refusal_for(begun, self.intent, recorded)
        return self

    async def dispatched(self) -> None:
        if self.replayed:
            raise _core.Replayed()
        if self._dispatched or self._completed:
            raise _core.dispatched_twice(self.intent.op_key)
        dispatch = await self.ledger.mark_dispatched(
            self.intent.op_key, target=self.intent.target, request_id=self.intent.request_id
        )
        if dispatch.refused or not dispatch.claimed:
            # Another caller or login holds the effect: it is theirs to complete.
            self._not_ours = True
        if dispatch.refused:
            raise LedgerRefused(dispatch.refused)
        if not dispatch.claimed:
            raise _core.refusal_for(Begun("in_flight", 0, dispatch.state, None), self.intent, None)
        self._dispatched = True

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
        completed = await self.ledger.complete(
            self.intent.op_key, target=self.intent.target, outcome=outcome, **fields
        )
        if completed.refused:
            raise LedgerRefused(completed.refused)
        self._completed = True
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
        if seen is not None:
            await self._complete(
                seen.outcome,
                error_class=seen.error_class,
                retryable=seen.retryable,
                reason=seen.reason,
                retry_after=seen.retry_after,
            )
        return isinstance(error, _core.Replayed)
