"""What the ledger answers when the provider must not be called, as exceptions
whose message tells a caller — a person or a language model — what to do next.

And what a provider call raises to say how it ended when it did not succeed:
only `NotPerformed` and `BusinessRejection` record a failure; `RateLimited`
a failure retryable after the provider's delay; anything else raised after
`dispatched()` records `unknown`.

And what the client refuses before the ledger is written (`BadArgument`),
or says of a block that used an effect wrongly (`Misuse`).
"""

from __future__ import annotations

from typing import Any


class EffectError(Exception):
    """The ledger said not to call the provider for this key."""

    decision: str = ""

    def __init__(self, op_key: str, state: str, message: str) -> None:
        super().__init__(message)
        self.op_key = op_key
        self.state = state


class InFlight(EffectError):
    decision = "in_flight"

    def __init__(self, op_key: str, state: str) -> None:
        super().__init__(
            op_key,
            state,
            f"{op_key} is already in flight (state {state}): the provider may have acted on it. "
            "Do not call it again and do not make a new key for the same action; "
            "the reconciler or an operator settles it. Report that it is being checked.",
        )


class Held(EffectError):
    decision = "held"

    def __init__(self, op_key: str, state: str) -> None:
        super().__init__(
            op_key,
            state,
            f"{op_key} is held: another open effect on the same target conflicts with it. "
            "It was not sent. Do not retry under another key; an operator releases or cancels it.",
        )


class Rejected(EffectError):
    decision = "rejected"

    def __init__(self, op_key: str, state: str, differences: dict[str, tuple[Any, Any]]) -> None:
        shown = "; ".join(f"{field}: recorded {was!r}, now {now!r}" for field, (was, now) in differences.items())
        super().__init__(
            op_key,
            state,
            f"{op_key} was already used for another intent ({shown or 'the terms differ'}). "
            "Nothing was sent. If this is a new action, it needs a new key built from its own "
            "business arguments; if it is the same action, use the recorded terms.",
        )
        self.differences = differences


class Stop(EffectError):
    decision = "stop"

    def __init__(self, op_key: str, state: str, result: Any) -> None:
        super().__init__(
            op_key,
            state,
            f"{op_key} is closed (state {state}): it failed for good, was cancelled or compensated. "
            "Nothing was sent. Do not retry it; report the outcome.",
        )
        self.result = result


class Overlap(EffectError):
    decision = "overlap"

    def __init__(self, op_key: str, state: str, overlaps: Any) -> None:
        super().__init__(
            op_key,
            state,
            f"{op_key} overlaps a booking already made on the target ({overlaps}): it would be a "
            "second booking, not a retry. Nothing was sent.",
        )
        self.overlaps = overlaps


class Wait(EffectError):
    decision = "wait"

    def __init__(self, op_key: str, state: str, retry_after: float) -> None:
        super().__init__(
            op_key,
            state,
            f"{op_key} was rate limited by the provider: call again with the same arguments "
            f"after {retry_after:g} seconds. Nothing was sent.",
        )
        self.retry_after = retry_after


class NotYours(EffectError):
    """The key is another caller's (another login of the ledger, outside its
    tenant): the ledger answered `refused` and told nothing of the effect —
    no state, no result. `state` is empty."""

    decision = "refused"

    def __init__(self, op_key: str) -> None:
        super().__init__(
            op_key,
            "",
            f"{op_key} belongs to another caller: nothing was done, and nothing of its effect can be told. "
            "Do not retry it; make the key from your own business arguments, or ask an operator.",
        )


class NotPerformed(Exception):
    """Raise it when the provider certainly did nothing (a refusal before
    the call, or a provider answer that says so): the effect is recorded
    failed, and retryable unless told otherwise."""

    def __init__(self, reason: str, *, retryable: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class BusinessRejection(NotPerformed):
    """The provider refused these terms for good: failed, never retried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, retryable=False)


class RateLimited(Exception):
    """The provider asked to be called again later, with the same key."""

    def __init__(self, retry_after: float, reason: str = "rate limited") -> None:
        super().__init__(f"{reason} (retry after {retry_after:g} s)")
        self.retry_after = retry_after
        self.reason = reason


class ProviderError(Exception):
    """A provider answer that is not a success: a status code of 5xx is
    `server_error` (the outcome is unknown)."""

    def __init__(self, status: int, reason: str = "") -> None:
        super().__init__(f"provider answered {status} {reason}".strip())
        self.status = status


class LedgerRefused(Exception):
    """The ledger refused a writer call (another login's effect, another
    target's key): nothing was written."""


class BadArgument(ValueError):
    """A call's argument cannot make its key or its amount (no value, money
    that is not a whole number of minor units, NaN): refused before the
    ledger is written, so nothing was done and the provider was not called."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


class Misuse(Exception):
    """A block used its effect in a way that hides what happened at the
    provider (`dispatched()` twice, `succeeded()` without `dispatched()`):
    said at once rather than recorded as something it was not."""
