"""The synchronous client: `Ledger.effect(...)` and `@Ledger.tool(...)`."""

from __future__ import annotations

import functools
import os
import threading
from types import TracebackType
from typing import Any, Callable, Mapping, ParamSpec, TypeVar, cast

import psycopg
from psycopg.rows import dict_row

from . import _core
from ._core import Begun, Completed, Dispatch, Intent
from .errors import LedgerRefused, NotPerformed, RateLimited

P = ParamSpec("P")
R = TypeVar("R")


class Ledger:
    """A writer of the effect ledger. Each call is one short autocommit
    transaction: no transaction stays open across the provider call, and a
    connection is only kept idle between calls (up to `max_idle`, 0 to
    connect for every call; opening one costs more than the call itself).
    Statements are never prepared, so the ledger may sit behind PgBouncer
    in transaction mode, where an idle client holds no server connection."""

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
        self._idle: list[psycopg.Connection[dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # What each tool this ledger decorated makes of its arguments.
        self._intents: dict[Callable[..., Any], Callable[[Mapping[str, Any]], Intent]] = {}

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

    def _one(self, sql: str, args: Mapping[str, Any]) -> dict[str, Any] | None:
        connection = self._checkout()
        try:
            row = connection.execute(sql, args).fetchone()
        except BaseException:
            connection.close()
            raise
        self._checkin(connection)
        return row

    # The three SQL calls, answered as they are.

    def begin(self, intent: Intent) -> Begun:
        row = self._one(_core.BEGIN_SQL, intent.begin_args(self.requested_by))
        assert row is not None
        return Begun(row["decision"], row["effect_id"], row["state"], row["result"])

    def mark_dispatched(self, op_key: str, *, target: str, request_id: str | None = None) -> Dispatch:
        row = self._one(
            _core.DISPATCH_SQL,
            {"op_key": op_key, "target": target, "request_id": request_id, "worker": self.requested_by},
        )
        assert row is not None
        return Dispatch(row["claimed"], row["state"], row["refused"])

    def complete(self, op_key: str, *, target: str, outcome: str, **fields: Any) -> Completed:
        row = self._one(_core.COMPLETE_SQL, _core.complete_args(op_key, target, outcome, self.requested_by, **fields))
        assert row is not None
        return Completed(row["applied"], row["state"], row["late"], row["refused"])

    def recorded(self, op_key: str) -> dict[str, Any] | None:
        return self._one(_core.RECORDED_SQL, {"op_key": op_key})

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
    ) -> Effect:
        """Begins the effect: `proceed` and `retry` run the block; `replay`
        ends it at `dispatched()` with the stored result in `.result`; any
        other decision raises its exception (`effectwatch.errors`)."""
        intent = Intent(op_key, action, target, params, amount_minor, currency, provider, request_id)
        return Effect(self, intent)

    def tool(
        self,
        *,
        action: str,
        op_key: str,
        target: str,
        params: Callable[..., Mapping[str, Any]] | None = None,
        amount_minor: str | None = None,
        currency: str | None = None,
        provider: str | None = None,
        external_ref: Callable[[Any], str | None] | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Wraps a provider call: its key and target come from the call's
        business arguments through the templates (`"refund:{order_id}"`);
        its params are those arguments (or what `params(**arguments)`
        returns); `amount_minor` and `currency` name arguments. The result
        must be JSON: a replay returns it as stored."""

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            key_template = _core.KeyTemplate("op_key", op_key, function)
            target_template = _core.KeyTemplate("target", target, function)
            _core.named_arguments(function, amount_minor=amount_minor, currency=currency)

            def intent_for(arguments: Mapping[str, Any]) -> Intent:
                return Intent(
                    key_template.render(arguments),
                    action,
                    target_template.render(arguments),
                    params(**arguments) if params else dict(arguments),
                    arguments[amount_minor] if amount_minor else None,
                    arguments[currency] if currency else None,
                    provider,
                )

            @functools.wraps(function)
            def run(*args: P.args, **kwargs: P.kwargs) -> R:
                intent = intent_for(_core.bound_arguments(function, args, kwargs))
                with self.effect(
                    intent.op_key,
                    action=intent.action,
                    target=intent.target,
                    params=intent.params,
                    amount_minor=intent.amount_minor,
                    currency=intent.currency,
                    provider=intent.provider,
                ) as effect:
                    effect.dispatched()
                    value = function(*args, **kwargs)
                    effect.succeeded(external_ref(value) if external_ref else None, value)
                return cast(R, effect.result)

            self._intents[run] = intent_for
            return run

        return decorate

    def intent_of(self, tool: Callable[..., Any], **arguments: Any) -> Intent:
        """The effect a call of `tool` (decorated by this ledger's `tool`)
        with these keyword arguments is: its key, target and params."""
        intent_for = self._intents.get(tool)
        if intent_for is None:
            raise ValueError(f"{getattr(tool, '__name__', tool)!r} is not a tool this ledger decorated")
        return intent_for(arguments)


class Effect:
    """One effect in progress (see `Ledger.effect`)."""

    def __init__(self, ledger: Ledger, intent: Intent) -> None:
        self.ledger = ledger
        self.intent = intent
        self.begun: Begun | None = None
        self.result: Any = None
        self.replayed = False
        self._dispatched = False
        self._completed = False
        self._not_ours = False

    def __enter__(self) -> Effect:
        begun = self.ledger.begin(self.intent)
        self.begun = begun
        if begun.decision == "replay":
            self.replayed = True
            self.result = begun.result
        elif begun.decision not in _core.MAY_RUN:
            recorded = self.ledger.recorded(self.intent.op_key) if begun.decision == "rejected" else None
            raise _core.refusal_for(begun, self.intent, recorded)
        return self

    def dispatched(self) -> None:
        """Call it just before the provider call: claims the effect. Any
        exception after it records the outcome as unknown."""
        if self.replayed:
            raise _core.Replayed()
        dispatch = self.ledger.mark_dispatched(
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

    def succeeded(self, external_ref: str | None = None, result: Any = None) -> Completed:
        completed = self._complete("succeeded", external_ref=external_ref, result=result)
        self.result = result
        return completed

    def _complete(self, outcome: str, **fields: Any) -> Completed:
        completed = self.ledger.complete(self.intent.op_key, target=self.intent.target, outcome=outcome, **fields)
        if completed.refused:
            raise LedgerRefused(completed.refused)
        self._completed = True
        return completed

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool:
        if isinstance(error, _core.Replayed):
            return True
        if self._completed or self._not_ours:
            return False
        if error is None:
            if self._dispatched:
                # The block ended without saying how the call went.
                self._complete("unknown", reason="the block ended without succeeded()")
            else:
                self._complete("failed", retryable=True, reason="not dispatched: the block ended first")
            return False
        if not self._dispatched and not isinstance(error, (NotPerformed, RateLimited)):
            # The provider was never called: the same key may run again once
            # the cause is fixed (cancelled would close the key for good).
            self._complete("failed", retryable=True, reason=f"not dispatched: {type(error).__name__}: {error}")
            return False
        seen = _core.outcome_of(error)
        self._complete(
            seen.outcome,
            error_class=seen.error_class,
            retryable=seen.retryable,
            reason=seen.reason,
            retry_after=seen.retry_after,
        )
        return False
