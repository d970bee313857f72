"""An OpenAI Agents SDK agent whose refund tool (asyncio) records each refund
in the effectwatch ledger before making it. The model asks for a refund, the
same refund again (a replay: the provider is not called twice), the same
refund with another amount (refused: the model is told why), and a refund
whose reply is lost after the provider made it (the model is told it may
have happened and not to retry; asking again is answered "in flight").

    pip install "effectwatch[openai-agents]"
    EFFECTWATCH_DATABASE_URL=postgres://agent@db/payments python examples/openai_agents_refund.py

The model is scripted and the provider is effectwatch.testing.FakePayments,
so it runs without an API key; with a real model, name it in the Agent
(`model="gpt-5"`), keep tracing on, and drop the stand-ins below.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any, AsyncIterator, Mapping, cast

from agents import Agent, ModelSettings, RunConfig, Runner, Tool, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_prompt_param import ResponsePromptParam

from effectwatch import AsyncLedger
from effectwatch.openai_agents import as_tool
from effectwatch.testing import FakePayments

payments = FakePayments()  # your provider's client


async def main(database_url: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="openai-agents-refund-agent")

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency", provider="payments")
    async def refund(order_id: str, amount_minor: int, currency: str) -> dict[str, Any]:
        """Refund an order's amount, in minor units of its currency, to the customer."""
        return await asyncio.to_thread(
            payments.refund, order_id, amount_minor, currency, idempotency_key=f"refund:{order_id}"
        )

    run = uuid.uuid4().hex[:6].upper()
    order, lost = f"OA-{run}", f"OA-{run}-LOST"
    payments.lose_replies_for.add(lost)  # the provider makes this refund, then the connection drops
    model = ScriptedModel([
        {"order_id": order, "amount_minor": 1500, "currency": "EUR"},
        {"order_id": order, "amount_minor": 1500, "currency": "EUR"},
        {"order_id": order, "amount_minor": 2500, "currency": "EUR"},
        {"order_id": lost, "amount_minor": 900, "currency": "EUR"},
        {"order_id": lost, "amount_minor": 900, "currency": "EUR"},
    ])

    agent = Agent(name="refunds", instructions="You refund orders.", model=model, tools=[as_tool(refund)])
    result = await Runner.run(agent, f"Refund orders {order} and {lost}.", run_config=RunConfig(tracing_disabled=True))

    for told in model.told:
        print(f"told: {told}")
    for key in (f"refund:{order}", f"refund:{lost}"):
        print(f"provider made {payments.refunds_for(key)} refund for {key}")
    print(f"agent: {result.final_output}")


class ScriptedModel(Model):
    """A stand-in for a model: asks for each scripted tool call in turn,
    then answers "done". `told` is what the tool results said to it."""

    def __init__(self, calls: list[dict[str, Any]]) -> None:
        self.calls = calls
        self.told: list[str] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        items = [cast(Mapping[str, Any], item) for item in ([] if isinstance(input, str) else input)]
        self.told = [str(item["output"]) for item in items if item.get("type") == "function_call_output"]
        step = len(self.told)
        output: list[Any]
        if step < len(self.calls):
            output = [ResponseFunctionToolCall(
                type="function_call", call_id=f"call-{step}", name="refund", arguments=json.dumps(self.calls[step]),
            )]
        else:
            output = [ResponseOutputMessage(
                id="msg-done", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
            )]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("this example runs the agent without streaming")


if __name__ == "__main__":
    url = os.environ.get("EFFECTWATCH_DATABASE_URL")
    if not url:
        sys.exit("set EFFECTWATCH_DATABASE_URL to a ledger's database (one `effectwatch migrate` installed)")
    asyncio.run(main(url))
