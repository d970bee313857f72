"""A refund agent as the tests run it, in this process or another one."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from effectwatch import InFlight, Ledger, ProviderError, RateLimited


def post_refund(provider_url: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{provider_url}/refunds",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=float(body.get("timeout", 10))) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as error:
        if error.code == 429:
            raise RateLimited(float(error.headers.get("Retry-After", "60"))) from error
        raise ProviderError(error.code) from error


def refund_tool(
    ledger: Ledger, provider_url: str, behave: str | None = None, delay: float = 0, action: str = "refund"
) -> Any:
    @ledger.tool(
        action=action,
        op_key="refund:{order_id}:{approval}",
        target="invoice:{order_id}",
        params=lambda order_id, approval, amount_minor, currency: {
            "order_id": order_id, "approval": approval, "amount_minor": amount_minor, "currency": currency,
        },
        amount_minor="amount_minor",
        currency="currency",
        external_ref=lambda answer: str(answer["id"]),
    )
    def refund(order_id: str, approval: str, amount_minor: int, currency: str) -> dict[str, Any]:
        key = f"refund:{order_id}:{approval}"
        body: dict[str, Any] = {"amount_minor": amount_minor, "currency": currency, "behave": behave, "delay": delay}
        return post_refund(provider_url, key, body)

    return refund


def until_settled(call: Any, *args: Any) -> tuple[Any, int]:
    """Calls again while the effect is in flight; answers the result and
    how many times it was told in_flight."""
    in_flight = 0
    while True:
        try:
            return call(*args), in_flight
        except InFlight:
            in_flight += 1
            time.sleep(0.05)


if __name__ == "__main__":
    database_url, provider_url, order_id, behave, delay = sys.argv[1:6]
    action = sys.argv[6] if len(sys.argv) > 6 else "refund"
    ledger = Ledger(database_url, requested_by="agent-process")
    refund = refund_tool(ledger, provider_url, behave or None, float(delay), action)
    result, in_flight = until_settled(refund, order_id, "AP-1", 1500, "EUR")
    print(json.dumps({"result": result, "in_flight": in_flight}), flush=True)
