"""effectwatch.testing's replay set, run against this suite's provider
process through the refund agent's own tool."""

from __future__ import annotations

from typing import Any, Mapping

from agent import refund_tool
from effectwatch import Ledger
from effectwatch.testing import replay_set
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
    assert report.all_held, str(report)
    assert len(report.lines) == 4


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
    held = {line.check: line.held for line in report.lines}
    assert held == {
        "the same call twice acts once and answers the same": False,
        "a material change under the old key is refused": False,
        "distinct actions do not collapse": True,
    }, str(report)
