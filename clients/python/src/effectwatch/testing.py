"""The replay set for your own wrapper: before an agent gets write authority,
run its decorated tool against deliberate duplicates on a staging ledger and
assert the provider's state, not only local logs.

    report = replay_set(refund, same={"order_id": "T-1", "amount_minor": 100},
                        changed={"order_id": "T-1", "amount_minor": 200},
                        distinct=[{"order_id": "T-2", ...}, {"order_id": "T-3", ...}],
                        provider_calls=lambda args: staging.count(args["order_id"]))
    assert report.all_held, report

`tool` is the function `Ledger.tool` decorated, or your wrapper around it
(made with `functools.wraps`, which the ledger follows to the tool). Each
line says whether it held and what the provider showed. The failure list
needs more than the wrapper: pass `ledger` (the `Ledger` that decorated the
tool) and `crashed` for a crash after dispatch and a late message; `lost`
and `lose_reply` (a context manager under which your staging provider acts
and then drops its reply) for a lost reply. A line that was not given what
it needs says "not checked", and `all_held` is false until every line was
checked and held.

The report (`Report`):
- `lines`: one `Line` per check, in the order run, each with `check` (what
  must hold, e.g. `CRASH`), `held`, `provider_state` (what
  `provider_calls` answered: a count, or a list of counts), `detail` (what
  was seen, in one line: the refusal's fields, the errors and how many
  times each) and `checked` (false: not given what it needs).
- `all_held`: every line checked and held. `not_checked`: the checks that
  were not run.
- `str(report)`: one line per check,
  `[held|NOT HELD|not checked] CHECK: provider STATE (DETAIL)`.

As a pytest test against a staging ledger and provider:

    def test_the_refund_tool_holds_the_replay_set(staging) -> None:
        report = replay_set(refund, same=..., changed=..., distinct=[...],
                            provider_calls=staging.count, concurrent=...,
                            ledger=ledger, crashed=..., lost=..., lose_reply=staging.lose_reply)
        assert report.all_held, str(report)
"""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, Mapping, Sequence

from .errors import EffectError, InFlight, Rejected
from .ledger import Ledger


@dataclass(frozen=True)
class Line:
    check: str
    held: bool
    provider_state: Any
    detail: str = ""
    checked: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "detail", one_line(self.detail))


@dataclass
class Report:
    lines: list[Line] = field(default_factory=list)

    @property
    def all_held(self) -> bool:
        return all(line.held and line.checked for line in self.lines)

    @property
    def not_checked(self) -> list[str]:
        return [line.check for line in self.lines if not line.checked]

    def __str__(self) -> str:
        def mark(line: Line) -> str:
            return "not checked" if not line.checked else "held" if line.held else "NOT HELD"

        return "\n".join(
            one_line(
                f"[{mark(line)}] {line.check}: provider {line.provider_state!r}"
                + (f" ({line.detail})" if line.detail else "")
            )
            for line in self.lines
        )


def one_line(text: str) -> str:
    return " ".join(text.split())


def tally(errors: Sequence[BaseException]) -> str:
    """Each error once, with how many times it was raised."""
    counted = Counter(one_line(f"{type(error).__name__}: {error}") for error in errors)
    return "; ".join(said if times == 1 else f"{times}x {said}" for said, times in counted.items())


class FakePayments:
    """An in-memory payment provider for examples and tests, as a staging
    provider would be: `refund(...)` makes a refund every time it is called
    and counts them by idempotency key (`refunds_for`). Under `lose_reply()`,
    or for an order in `lose_replies_for`, it makes the refund and then loses
    the answer (`ConnectionResetError`), as a provider whose reply was lost
    after it acted."""

    def __init__(self) -> None:
        self.made: Counter[str] = Counter()
        self.lose_replies_for: set[str] = set()
        self._losing = False
        self._lock = threading.Lock()

    def refund(self, order_id: str, amount_minor: int, currency: str, *, idempotency_key: str) -> dict[str, Any]:
        with self._lock:
            self.made[idempotency_key] += 1
            lost = self._losing or order_id in self.lose_replies_for
        if lost:
            raise ConnectionResetError(f"the connection was reset after the refund of {order_id} was made")
        return {"id": f"re_{idempotency_key}", "order_id": order_id, "amount_minor": amount_minor,
                "currency": currency, "status": "succeeded"}

    def refunds_for(self, idempotency_key: str) -> int:
        with self._lock:
            return self.made[idempotency_key]

    @contextmanager
    def lose_reply(self) -> Iterator[None]:
        """Every refund made in the block loses its reply."""
        self._losing = True
        try:
            yield
        finally:
            self._losing = False


CRASH = "a crash after dispatch is never repeated"
LOST = "a reply lost after the effect is not retried"
LATE = "a late success settles it and the next call replays"
REOPEN = "a late message cannot reopen settled work"


def replay_set(
    tool: Callable[..., Any],
    *,
    same: Mapping[str, Any],
    changed: Mapping[str, Any],
    distinct: Sequence[Mapping[str, Any]],
    provider_calls: Callable[[Mapping[str, Any]], int],
    concurrent: Mapping[str, Any] | None = None,
    deliveries: int = 8,
    ledger: Ledger | None = None,
    crashed: Mapping[str, Any] | None = None,
    lost: Mapping[str, Any] | None = None,
    lose_reply: Callable[[], ContextManager[object]] | None = None,
) -> Report:
    """Drives `tool` (a `Ledger.tool`-decorated function, or a wrapper of
    one made with `functools.wraps`) with keyword
    arguments: `same` twice, `changed` (same key, a material parameter
    changed), each of `distinct` (two genuinely different actions),
    `concurrent` delivered `deliveries` times at once, `crashed` after a
    caller that died once it had dispatched it, and `lost` with its reply
    dropped, then answered late. `provider_calls` answers how many times the
    provider acted for a set of arguments: each argument set is the test's
    own, never called before."""
    report = Report()

    first = tool(**same)
    second = tool(**same)
    calls = provider_calls(same)
    report.lines.append(
        Line("the same call twice acts once and answers the same", calls == 1 and first == second, calls)
    )

    try:
        tool(**changed)
        report.lines.append(Line("a material change under the old key is refused", False, provider_calls(same),
                                 "the changed call ran"))
    except Rejected as rejected:
        calls = provider_calls(same)
        report.lines.append(Line("a material change under the old key is refused", calls == 1, calls,
                                 ", ".join(rejected.differences)))

    results = [tool(**arguments) for arguments in distinct]
    counts = [provider_calls(arguments) for arguments in distinct]
    report.lines.append(
        Line("distinct actions do not collapse", counts == [1] * len(distinct) and len(set(map(repr, results))) == len(results),
             counts)
    )

    if concurrent is not None:
        errors: list[BaseException] = []
        barrier = threading.Barrier(deliveries)

        def deliver() -> None:
            barrier.wait()
            try:
                tool(**concurrent)
            except InFlight:
                pass  # the expected answer while another delivery is at the provider
            except EffectError as error:
                errors.append(error)

        threads = [threading.Thread(target=deliver) for _ in range(deliveries)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        calls = provider_calls(concurrent)
        report.lines.append(Line(f"{deliveries} deliveries at once act once", calls == 1 and not errors, calls,
                                 tally(errors)))

    report.lines.append(_crash_after_dispatch(tool, ledger, crashed, provider_calls))
    report.lines.extend(_lost_reply_then_late(tool, ledger, lost, lose_reply, provider_calls))
    return report


def _not_checked(check: str, needs: str) -> Line:
    return Line(check, False, None, f"not checked: pass {needs}", checked=False)


def _crash_after_dispatch(
    tool: Callable[..., Any],
    ledger: Ledger | None,
    crashed: Mapping[str, Any] | None,
    provider_calls: Callable[[Mapping[str, Any]], int],
) -> Line:
    """A caller that claimed the effect and died before any answer, as a
    killed process leaves it: recorded and dispatched, nothing more. The
    rerun must be told it is in flight and must not call."""
    if ledger is None or crashed is None:
        return _not_checked(CRASH, "ledger= and crashed=")
    try:
        intent = ledger.intent_of(tool, **crashed)
    except ValueError as error:
        return Line(CRASH, False, None, f"not checked: {error}", checked=False)
    ledger.begin(intent)
    ledger.mark_dispatched(intent.op_key, target=intent.target)
    try:
        tool(**crashed)
    except InFlight:
        calls = provider_calls(crashed)
        return Line(CRASH, calls == 0, calls, "the rerun was told it is in flight")
    except EffectError as error:
        return Line(CRASH, False, provider_calls(crashed), f"the rerun was refused otherwise: {error}")
    return Line(CRASH, False, provider_calls(crashed), "the rerun ran the call again")


def _lost_reply_then_late(
    tool: Callable[..., Any],
    ledger: Ledger | None,
    lost: Mapping[str, Any] | None,
    lose_reply: Callable[[], ContextManager[object]] | None,
    provider_calls: Callable[[Mapping[str, Any]], int],
) -> list[Line]:
    if lost is None or lose_reply is None:
        return [_not_checked(LOST, "lost= and lose_reply="), _not_checked(LATE, "lost=, lose_reply= and ledger="),
                _not_checked(REOPEN, "lost=, lose_reply= and ledger=")]
    lines: list[Line] = []
    try:
        with lose_reply():
            tool(**lost)
        raised = "the call answered although its reply was to be lost"
    except Exception as error:  # whatever the wrapper raises for a dropped reply
        raised = type(error).__name__
    try:
        tool(**lost)
        repeat = "ran again"
    except InFlight:
        repeat = "in flight"
    except Exception as error:
        repeat = f"{type(error).__name__}: {error}"
    calls = provider_calls(lost)
    lines.append(Line(LOST, repeat == "in flight" and calls == 1, calls, f"first call: {raised}; repeat: {repeat}"))
    if ledger is None:
        return lines + [_not_checked(LATE, "ledger="), _not_checked(REOPEN, "ledger=")]

    # The provider's answer arrives after all (a webhook, a reconciliation).
    try:
        intent = ledger.intent_of(tool, **lost)
    except ValueError as error:
        return lines + [Line(check, False, None, f"not checked: {error}", checked=False) for check in (LATE, REOPEN)]
    late = ledger.complete(intent.op_key, target=intent.target, outcome="succeeded",
                           external_ref="late-answer", result={"late": True})
    try:
        replayed = tool(**lost)
        after = f"replayed {replayed!r}"
        settled = late.applied and replayed == {"late": True}
    except Exception as error:
        after = f"{type(error).__name__}: {error}"
        settled = False
    calls = provider_calls(lost)
    lines.append(Line(LATE, settled and calls == 1, calls, after))

    # A second, contrary message for the same key must not change it.
    contrary = ledger.complete(intent.op_key, target=intent.target, outcome="failed", retryable=False,
                               reason="a contrary message, late")
    try:
        still = tool(**lost)
        reopened = still != {"late": True}
    except Exception:
        reopened = True
    calls = provider_calls(lost)
    lines.append(Line(REOPEN, not contrary.applied and not reopened and calls == 1, calls,
                      f"late message applied: {contrary.applied}, flagged late: {contrary.late}"))
    return lines
