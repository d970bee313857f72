"""A Pydantic AI agent whose refund tool records each refund in the
effectwatch ledger before making it. The model asks for a refund, the same
refund again (a replay: the provider is not called twice), the same refund
with another amount (refused: the model is told why), and a refund whose
reply is lost after the provider made it (the model is told it may have
happened and not to retry; asking again is answered "in flight").

    pip install "effectwatch[pydantic-ai]"
    EFFECTWATCH_DATABASE_URL=postgres://agent@db/payments python examples/pydantic_ai_refund.py

The model is Pydantic AI's FunctionModel, scripted, and the provider is
effectwatch.testing.FakePayments, so it runs without an API key; with a
real model, name it (`Agent("openai:gpt-5", ...)`) and drop the stand-ins.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from effectwatch import Ledger
from effectwatch.pydantic_ai import as_tool
from effectwatch.testing import FakePayments

payments = FakePayments()  # your provider's client


def main(database_url: str) -> None:
    ledger = Ledger(database_url, requested_by="pydantic-ai-refund-agent")

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency", provider="payments")
    def refund(order_id: str, amount_minor: int, currency: str) -> dict[str, Any]:
        """Refund an order's amount, in minor units of its currency, to the customer."""
        return payments.refund(order_id, amount_minor, currency, idempotency_key=f"refund:{order_id}")

    run = uuid.uuid4().hex[:6].upper()
    order, lost = f"PA-{run}", f"PA-{run}-LOST"
    payments.lose_replies_for.add(lost)  # the provider makes this refund, then the connection drops
    model = FunctionModel(scripted([
        {"order_id": order, "amount_minor": 1500, "currency": "EUR"},
        {"order_id": order, "amount_minor": 1500, "currency": "EUR"},
        {"order_id": order, "amount_minor": 2500, "currency": "EUR"},
        {"order_id": lost, "amount_minor": 900, "currency": "EUR"},
        {"order_id": lost, "amount_minor": 900, "currency": "EUR"},
    ]))

    agent = Agent(model, tools=[as_tool(refund)], instructions="You refund orders.")
    result = agent.run_sync(f"Refund orders {order} and {lost}.")

    for message in result.all_messages():
        for part in message.parts if isinstance(message, ModelRequest) else []:
            if isinstance(part, ToolReturnPart):
                print(f"told ({part.outcome}): {part.model_response_str(wrap_if_error=False)}")
    for key in (f"refund:{order}", f"refund:{lost}"):
        print(f"provider made {payments.refunds_for(key)} refund for {key}")
    print(f"agent: {result.output}")


def scripted(calls: list[dict[str, Any]]) -> Any:
    """A stand-in for a model: asks for each scripted tool call in turn,
    then answers "done"."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(
            isinstance(part, ToolReturnPart)
            for message in messages if isinstance(message, ModelRequest) for part in message.parts
        )
        if step < len(calls):
            return ModelResponse(parts=[ToolCallPart("refund", calls[step], tool_call_id=f"call-{step}")])
        return ModelResponse(parts=[TextPart("done")])

    return model


if __name__ == "__main__":
    url = os.environ.get("EFFECTWATCH_DATABASE_URL")
    if not url:
        sys.exit("set EFFECTWATCH_DATABASE_URL to a ledger's database (one `effectwatch migrate` installed)")
    main(url)
