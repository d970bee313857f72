"""effectwatch.testing's replay set, run against this suite's provider
process through the refund agent's own tool."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from agent import post_refund, refund_tool
from effectwatch import Ledger, NotPerformed
from effectwatch.testing import CRASH, LATE, LOST, REOPEN, replay_set
from test_client import provider_calls


def test_the_replay_set_holds_for_the_refund_agent(database_url: str, provider_url: str, unique: str) -> None:
    refund = refund_tool(Ledger(database_url, requested_by="agent-replay-set"), provider_url, "slow", 0.3)

    def calls(arguments: Mapping[str, Any]) -> int:
        return provider_calls(provider_url, f"refund:{arguments['order_id']}:{arguments['approval']}")

    def order(suffix: str, amount_minor: int = 1500) -> dict[str, Any]:
        return {"order_id": f"RS-{unique}-{suffix}", "approval": "AP-1", "amount_minor": amount_minor, "currency": "EUR"}

    report = replay_set(
        refund,
        same=order("A"),
        changed=order("A", 2500),
        distinct=[order("B"), order("C")],
        concurrent=order("D"),
        provider_calls=calls,
    )
    # Without the ledger and a way to lose a reply, the failure list is not
    # checked, and the report does not pretend it held.
    assert not report.all_held
    assert report.not_checked == [CRASH, LOST, LATE, REOPEN], str(report)
    assert all(line.held for line in report.lines if line.checked), str(report)


def switchable_refund(ledger: Ledger, provider_url: str, behaviour: dict[str, str | None], *, lenient: bool) -> Any:
    """The refund agent's tool, its provider's behaviour switchable per
    call. `lenient` is the mistake the failure list is for: a dropped reply
    treated as 'not performed', so the next call runs it again."""

    @ledger.tool(action="refund", op_key="refund:{order_id}:{approval}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency", external_ref=lambda answer: str(answer["id"]))
    def refund(order_id: str, approval: str, amount_minor: int, currency: str) -> dict[str, Any]:
        body = {"amount_minor": amount_minor, "currency": currency, "behave": behaviour["behave"], "timeout": 2}
        try:
            return post_refund(provider_url, f"refund:{order_id}:{approval}", body)
        except OSError as error:
            if lenient:
                raise NotPerformed(f"treated as not performed: {error}") from error
            raise

    return refund


def run_failure_list(database_url: str, provider_url: str, unique: str, *, lenient: bool) -> Any:
    ledger = Ledger(database_url, requested_by=f"agent-failure-list-{'lenient' if lenient else 'strict'}")
    behaviour: dict[str, str | None] = {"behave": None}
    refund = switchable_refund(ledger, provider_url, behaviour, lenient=lenient)

    @contextmanager
    def lose_reply() -> Iterator[None]:
        behaviour["behave"] = "drop"
        try:
            yield
        finally:
            behaviour["behave"] = None

    def order(suffix: str, amount_minor: int = 1500) -> dict[str, Any]:
        return {"order_id": f"FL-{unique}-{suffix}", "approval": "AP-1", "amount_minor": amount_minor, "currency": "EUR"}

    def calls(arguments: Mapping[str, Any]) -> int:
        return provider_calls(provider_url, f"refund:{arguments['order_id']}:{arguments['approval']}")

    return replay_set(
        refund,
        same=order("A"),
        changed=order("A", 2500),
        distinct=[order("B"), order("C")],
        provider_calls=calls,
        ledger=ledger,
        crashed=order("K"),
        lost=order("L"),
        lose_reply=lose_reply,
    )


def test_the_whole_failure_list_holds_for_the_refund_agent(database_url: str, provider_url: str, unique: str) -> None:
    report = run_failure_list(database_url, provider_url, unique, lenient=False)
    assert report.all_held, str(report)
    assert report.not_checked == []
    assert {line.check for line in report.lines} >= {CRASH, LOST, LATE, REOPEN}


def test_the_failure_list_catches_a_lost_reply_treated_as_not_performed(
    database_url: str, provider_url: str, unique: str
) -> None:
    report = run_failure_list(database_url, provider_url, unique, lenient=True)
    held = {line.check: line.held for line in report.lines}
    assert held[LOST] is False, str(report)
    assert held[CRASH] is True, str(report)
    lost_line = next(line for line in report.lines if line.check == LOST)
    assert lost_line.provider_state == 2, str(report)


def test_the_replay_set_catches_a_key_made_per_call(unique: str) -> None:
    counts: dict[str, int] = {}

    def refund(order_id: str, approval: str, amount_minor: int, currency: str) -> dict[str, Any]:
        # The mistake the set is for: a fresh key (a per-turn id) on every call.
        counts[order_id] = counts.get(order_id, 0) + 1
        return {"id": f"re_{order_id}_{counts[order_id]}"}

    def order(suffix: str, amount_minor: int = 1500) -> dict[str, Any]:
        return {"order_id": f"NK-{unique}-{suffix}", "approval": "AP-1", "amount_minor": amount_minor, "currency": "EUR"}

    report = replay_set(
        refund,
        same=order("A"),
        changed=order("A", 2500),
        distinct=[order("B")],
        provider_calls=lambda arguments: counts.get(arguments["order_id"], 0),
    )
    held = {line.check: line.held for line in report.lines if line.checked}
    assert held == {
        "the same call twice acts once and answers the same": False,
        "a material change under the old key is refused": False,
        "distinct actions do not collapse": True,
    }, str(report)
