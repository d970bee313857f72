"""A refund tool server on the MCP Python SDK 1.x (`FastMCP`, `mcp<2`), over stdio,
written to stand behind the effectwatch gateway.

It reads the gateway's operation key from the request's
`_meta["io.effectwatch/op_key"]` and gives it to its provider as the
idempotency key, and it says what happened in the result's
`_meta["io.effectwatch/outcome"]`, so the gateway never has to guess from an
error's wording (which the 2.x SDK hides for any exception but its own
ToolError) whether a refund was made.

Behind the gateway, from the repository's root (docs/tool-servers.md):

    python3 -m venv /tmp/mcp1 && /tmp/mcp1/bin/pip install -r examples/tool_servers/python_mcp1/requirements.txt
    effectwatch gateway --policy examples/tool_servers/refunds.toml \\
        --upstream /tmp/mcp1/bin/python examples/tool_servers/python_mcp1/server.py

The provider is a stand-in kept in memory: a refund on an order id starting
DECLINE is declined, BUSY is turned away for now, TIMEOUT is made but its
answer never comes back; any other is made once per key.
"""

from __future__ import annotations

import itertools
from typing import Any, TypedDict

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import CallToolResult, TextContent, ToolAnnotations

OP_KEY = "io.effectwatch/op_key"
OUTCOME = "io.effectwatch/outcome"
PROVIDER_REF = "io.effectwatch/provider_ref"
RETRYABLE = "io.effectwatch/retryable"


class Declined(Exception):
    """The provider refused the refund: nothing was done."""


class Busy(Exception):
    """The provider turned the refund away for now: nothing was done."""


class ProviderTimeout(Exception):
    """The provider did not answer: the refund may have been made."""


class Provider:
    """A payment provider's stand-in, idempotent by the key it is given."""

    def __init__(self) -> None:
        self.refunds: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)

    def refund(
        self, key: str | None, order_id: str, amount_minor: int, currency: str
    ) -> dict[str, Any]:
        if key is not None and key in self.refunds:
            return self.refunds[key]
        if order_id.startswith("DECLINE"):
            raise Declined(f"order {order_id} is not refundable")
        if order_id.startswith("BUSY"):
            raise Busy("too many refunds at once; try again in a minute")
        made = {
            "id": f"re_{next(self._ids):04d}",
            "order_id": order_id,
            "amount_minor": amount_minor,
            "currency": currency,
            "idempotency_key": key,
        }
        self.refunds[key or made["id"]] = made
        if order_id.startswith("TIMEOUT"):
            raise ProviderTimeout("the provider did not answer within 10 s")
        return made

    def count(self, order_id: str) -> int:
        return sum(1 for made in self.refunds.values() if made["order_id"] == order_id)


provider = Provider()
mcp = FastMCP("example-refunds")


def text(said: str) -> list[TextContent]:
    return [TextContent(type="text", text=said)]


@mcp.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=False))
def refund(order_id: str, amount_minor: int, currency: str, ctx: Context) -> CallToolResult:
    """Refund an order through the payment provider (amount in minor units)."""
    # The SDK keeps a request's unknown `_meta` keys as extra attributes.
    key = getattr(ctx.request_context.meta, OP_KEY, None)
    try:
        made = provider.refund(key, order_id, amount_minor, currency)
    except Declined as declined:
        return CallToolResult(
            content=text(f"The provider declined the refund: {declined}."),
            isError=True,
            _meta={OUTCOME: "not_performed"},
        )
    except Busy as busy:
        return CallToolResult(
            content=text(f"No refund was made: {busy}."),
            isError=True,
            _meta={OUTCOME: "not_performed", RETRYABLE: True},
        )
    except ProviderTimeout as timeout:
        return CallToolResult(
            content=text(f"The refund may have been made: {timeout}."),
            isError=True,
            _meta={OUTCOME: "unknown"},
        )
    return CallToolResult(
        content=text(f"Refunded {amount_minor} {currency} on order {order_id} ({made['id']})."),
        structuredContent=made,
        _meta={OUTCOME: "performed", PROVIDER_REF: made["id"]},
    )


class Refunds(TypedDict):
    order_id: str
    count: int


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup_refunds(order_id: str) -> Refunds:
    """The refunds the payment provider holds for an order."""
    return {"order_id": order_id, "count": provider.count(order_id)}


if __name__ == "__main__":
    mcp.run()
