"""What the sync and asyncio ledgers share: the three SQL calls, their
answers, and the rules that turn an answer or an exception into what the
client does. Every rule of the ledger itself stays in the database."""

from __future__ import annotations

import inspect
import json
import socket
import string
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from psycopg.types.json import Jsonb

from .errors import (
    EffectError,
    Held,
    InFlight,
    NotPerformed,
    Overlap,
    ProviderError,
    RateLimited,
    Rejected,
    Stop,
    Wait,
)

# Integers are cast in the SQL: psycopg sends the smallest type that fits.
BEGIN_SQL = """select decision, effect_id, state, result from ledger.begin_effect(
    op_key => %(op_key)s, action => %(action)s, target => %(target)s, params => %(params)s,
    requested_by => %(requested_by)s, amount_minor => %(amount_minor)s::bigint,
    currency => %(currency)s, provider => %(provider)s, request_id => %(request_id)s)"""

DISPATCH_SQL = """select claimed, state, refused from ledger.mark_dispatched(
    op_key => %(op_key)s, request_id => %(request_id)s, worker => %(worker)s, target => %(target)s)"""

COMPLETE_SQL = """select applied, state, late, refused from ledger.complete_effect(
    op_key => %(op_key)s, outcome => %(outcome)s, external_ref => %(external_ref)s,
    result => %(result)s, retryable => %(retryable)s, reason => %(reason)s,
    request_id => %(request_id)s, worker => %(worker)s, error_class => %(error_class)s,
    retry_after => make_interval(secs => %(retry_after)s::float8), target => %(target)s)"""

# Read only when a key is rejected, to say which terms differ.
RECORDED_SQL = """select action, target, params, amount_minor, currency, provider
    from ledger.effects where op_key = %(op_key)s"""

MAY_RUN = ("proceed", "retry")


@dataclass(frozen=True)
class Begun:
    decision: str
    effect_id: int
    state: str
    result: Any


@dataclass(frozen=True)
class Dispatch:
    claimed: bool
    state: str
    refused: str | None


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

    def begin_args(self, requested_by: str) -> dict[str, Any]:
        return {
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


def differences(intent: Intent, recorded: Mapping[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """The terms a rejected call changed, field by field (params by key)."""
    if recorded is None:  # pruned: only the tombstone's hash is left
        return {}
    found: dict[str, tuple[Any, Any]] = {}
    offered = {
        "action": intent.action,
        "target": intent.target,
        "amount_minor": intent.amount_minor,
        "currency": intent.currency.upper() if intent.currency else None,
        "provider": intent.provider,
    }
    for field, now in offered.items():
        if recorded.get(field) != now:
            found[field] = (recorded.get(field), now)
    was_params: Mapping[str, Any] = recorded.get("params") or {}
    now_params = json.loads(json.dumps(dict(intent.params)))
    for key in sorted(set(was_params) | set(now_params)):
        if was_params.get(key) != now_params.get(key):
            found[f"params.{key}"] = (was_params.get(key), now_params.get(key))
    return found


def refusal_for(begun: Begun, intent: Intent, recorded: Mapping[str, Any] | None) -> EffectError:
    """The exception for a decision that forbids calling the provider."""
    result = begun.result if isinstance(begun.result, dict) else {}
    if begun.decision == "in_flight":
        return InFlight(intent.op_key, begun.state)
    if begun.decision == "held":
        return Held(intent.op_key, begun.state)
    if begun.decision == "rejected":
        return Rejected(intent.op_key, begun.state, differences(intent, recorded))
    if begun.decision == "stop":
        return Stop(intent.op_key, begun.state, begun.result)
    if begun.decision == "overlap":
        return Overlap(intent.op_key, begun.state, result.get("overlaps"))
    if begun.decision == "wait":
        return Wait(intent.op_key, begun.state, float(result.get("retry_after_seconds", 60)))
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


def template_fields(template: str) -> list[str]:
    return [name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name]


class KeyTemplate:
    """A key or target made from the call's business arguments. A template
    naming no argument of the function is refused when the tool is
    declared: a constant key collapses distinct actions, and a key from a
    per-turn id makes every retry a new action."""

    def __init__(self, what: str, template: str, function: Callable[..., Any]) -> None:
        self.signature = inspect.signature(function)
        fields = template_fields(template)
        if not fields:
            raise ValueError(
                f"{what} template {template!r} names no argument of {function.__name__}: "
                "build it from the call's business arguments, e.g. 'refund:{order_id}'"
            )
        unknown = [f for f in fields if f not in self.signature.parameters]
        if unknown:
            raise ValueError(
                f"{what} template {template!r} names {', '.join(unknown)}, which "
                f"{function.__name__} does not take (it takes {', '.join(self.signature.parameters)})"
            )
        self.template = template

    def render(self, arguments: Mapping[str, Any]) -> str:
        return self.template.format(**arguments)


class Replayed(Exception):
    """Ends a replayed effect's block at dispatched(): the provider is
    never reached."""


def named_arguments(function: Callable[..., Any], **names: str | None) -> None:
    """Refuses, when a tool is declared, an argument name it does not take."""
    parameters = inspect.signature(function).parameters
    for role, name in names.items():
        if name is not None and name not in parameters:
            raise ValueError(f"{role}={name!r} names no argument of {function.__name__}")


def bound_arguments(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)
