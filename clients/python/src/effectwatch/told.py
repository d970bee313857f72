"""What a language model is told when a ledger tool's call did not return a
result: one text saying what happened, whether the provider may already
have acted, and what not to do next. The framework adapters
(`effectwatch.langchain`, `effectwatch.openai_agents`,
`effectwatch.pydantic_ai`) hand it to the model as the tool's answer, so a
refused call is something the model reads and acts on, never an exception
that ends its run. Usable on its own for any other framework:

    try:
        answer = refund(**arguments)
    except Exception as error:
        answer = told("refund", error).text

The kinds, and which errors are "maybe done":

| kind | what happened | errors |
|---|---|---|
| `bad_argument` | nothing: the arguments cannot make the key or the amount | `BadArgument` |
| `refused` | nothing now: the ledger said not to call the provider | `InFlight`, `Held`, `Rejected`, `Stop`, `Overlap`, `NotYours`, `Wait` (any `EffectError`), `LedgerRefused` |
| `maybe_done` | the provider may have been reached and no answer was recorded: it may have acted | any exception after `dispatched()` but `NotPerformed`/`RateLimited` (recorded `unknown`), and `Misuse` where the effect was recorded `unknown` |
| `not_done` | the provider was not reached, or said it did nothing | an exception before `dispatched()` (`validate=`, a function's own checks), `NotPerformed`, `BusinessRejection`, `RateLimited` |
| `unclear` | an error the ledger left no trace on (e.g. the database unreachable) | anything else |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._core import ended_by
from .errors import BadArgument, EffectError, LedgerRefused, Wait

Kind = Literal["bad_argument", "refused", "maybe_done", "not_done", "unclear"]


@dataclass(frozen=True)
class Told:
    kind: Kind
    text: str

    @property
    def maybe_performed(self) -> bool:
        """Whether the provider may have acted on the call."""
        return self.kind == "maybe_done"

    @property
    def retry_with_other_arguments(self) -> bool:
        """Whether calling again with corrected arguments is the right next
        step (and the only kind where it is)."""
        return self.kind == "bad_argument"


def _said(error: BaseException) -> str:
    said = " ".join(str(error).split())
    return f"{type(error).__name__}: {said}" if said else type(error).__name__


def told(tool: str, error: BaseException) -> Told:
    """What to tell the model of `error`, raised by a call of the ledger
    tool named `tool` (or by a wrapper around it)."""
    if isinstance(error, BadArgument):
        return Told("bad_argument", f"{tool} was not called: {error}")
    if isinstance(error, Wait):
        return Told("refused", f"{tool} was not run now: {error}")
    if isinstance(error, EffectError):
        return Told("refused", f"{tool} was not run: {error}")
    if isinstance(error, LedgerRefused):
        return Told(
            "refused",
            f"{tool} was not run: the ledger refused it ({_said(error)}). Nothing was sent. "
            "Do not retry it under another key; report it.",
        )
    ended = ended_by(error)
    if ended is None:
        return Told(
            "unclear",
            f"{tool} failed ({_said(error)}) and it is not known whether it was performed. "
            f"Do not call {tool} again for this action until it has been checked; report the error.",
        )
    if ended.maybe_performed:
        return Told(
            "maybe_done",
            f"{tool} may have been performed: the call reached the provider and no answer came back "
            f"({_said(error)}). It is recorded as unknown under {ended.op_key}. Do not call {tool} again "
            "for this action, with these or other arguments or under another key: the reconciler or "
            "an operator settles it. Tell the user it is being checked.",
        )
    recorded = ended.recorded
    if recorded is not None and recorded.error_class == "rate_limited":
        return Told(
            "not_done",
            f"{tool} was not performed: the provider asked to be called later ({_said(error)}). "
            f"Call it again with the same arguments after {recorded.retry_after or 60:g} seconds.",
        )
    if recorded is not None and recorded.retryable is False:
        return Told(
            "not_done",
            f"{tool} was not performed: the provider refused it for good ({_said(error)}). "
            f"Do not call {tool} again for this action; report the refusal.",
        )
    where = "the provider said it did nothing" if ended.dispatched else "the provider was not called"
    return Told(
        "not_done",
        f"{tool} was not performed ({where}): {_said(error)}. Nothing happened; once the cause is "
        "fixed, the same call may be made again.",
    )
