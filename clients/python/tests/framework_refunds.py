"""What the three framework tests share: the refund tool (sync and asyncio)
against this suite's provider process, the calls the scripted model makes,
and what must hold of the provider, the ledger and what the model was told."""

from __future__ import annotations

import ast
import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from agent import post_refund
from effectwatch import AsyncLedger, Ledger
from test_client import effect_row, provider_calls

def read(answer: str) -> Any:
    """A tool's answer as the model got it: JSON (LangChain, Pydantic AI)
    or a Python literal (the OpenAI Agents SDK's str() of a dict)."""
    try:
        return json.loads(answer)
    except ValueError:
        return ast.literal_eval(answer)


DESCRIPTION = "Refund an order's amount, in minor units of its currency, to the customer: once per order."


@dataclass
class Refunds:
    """One test's refund tool: the orders whose provider reply is lost
    (the provider acts, then drops the connection) are in `lose`."""

    database_url: str
    provider_url: str
    unique: str
    mode: str  # "sync" or "async"
    lose: set[str] = field(default_factory=set)

    @property
    def order(self) -> str:
        return f"FW-{self.unique}-A"

    @property
    def lost(self) -> str:
        return f"FW-{self.unique}-L"

    def body(self, order_id: str, amount_minor: int, currency: str) -> dict[str, Any]:
        behave = "drop" if order_id in self.lose else None
        return post_refund(
            self.provider_url,
            f"refund:{order_id}",
            {"amount_minor": amount_minor, "currency": currency, "behave": behave, "timeout": 5},
        )

    def tool(self) -> Callable[..., Any]:
        self.lose.add(self.lost)
        return self.sync_tool() if self.mode == "sync" else self.async_tool()

    def sync_tool(self) -> Callable[..., dict[str, Any]]:
        ledger = Ledger(self.database_url, requested_by="agent-sync")

        @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                     amount_minor="amount_minor", currency="currency", provider="payments",
                     external_ref=lambda answer: str(answer["id"]))
        def refund(order_id: str, amount_minor: int, currency: str) -> dict[str, Any]:
            """Refund an order's amount, in minor units of its currency, to the customer: once per order."""
            return self.body(order_id, amount_minor, currency)

        return refund

    def async_tool(self) -> Callable[..., Awaitable[dict[str, Any]]]:
        ledger = AsyncLedger(self.database_url, requested_by="agent-async")

        @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                     amount_minor="amount_minor", currency="currency", provider="payments",
                     external_ref=lambda answer: str(answer["id"]))
        async def refund(order_id: str, amount_minor: int, currency: str) -> dict[str, Any]:
            """Refund an order's amount, in minor units of its currency, to the customer: once per order."""
            return await asyncio.to_thread(self.body, order_id, amount_minor, currency)

        return refund

    def calls(self) -> list[dict[str, Any]]:
        """What the model asks, in order: a refund, the same again, the same
        key with another amount, and a refund whose reply is lost, asked
        twice."""
        return [
            {"order_id": self.order, "amount_minor": 1500, "currency": "EUR"},
            {"order_id": self.order, "amount_minor": 1500, "currency": "EUR"},
            {"order_id": self.order, "amount_minor": 2500, "currency": "EUR"},
            {"order_id": self.lost, "amount_minor": 900, "currency": "EUR"},
            {"order_id": self.lost, "amount_minor": 900, "currency": "EUR"},
        ]

    def check(self, told: list[str]) -> None:
        """What the model was told of each call, and what the provider and
        the ledger hold: one refund per business action."""
        assert len(told) == 5, told
        first, replayed, changed, lost, again = told
        assert f"re_refund:{self.order}" in first, first
        # The stored result, as the provider answered it (jsonb keeps its
        # members in an order of its own).
        assert read(replayed) == read(first), "a replay answers the stored result"
        assert "was already used for another intent" in changed, changed
        assert "recorded 1500, now 2500" in changed and "Nothing was sent" in changed, changed
        assert "may have been performed" in lost and "Do not call refund again" in lost, lost
        assert f"refund:{self.lost}" in lost and "unknown" in lost, lost
        assert "already in flight" in again and "Do not call it again" in again, again

        assert provider_calls(self.provider_url, f"refund:{self.order}") == 1
        assert provider_calls(self.provider_url, f"refund:{self.lost}") == 1
        settled = effect_row(self.database_url, f"refund:{self.order}")
        assert (settled["state"], settled["amount_minor"]) == ("succeeded", 1500)
        unknown = effect_row(self.database_url, f"refund:{self.lost}")
        assert (unknown["state"], unknown["error_class"], unknown["in_unknown_pane"]) == (
            "unknown", "connection_reset", True,
        )
