"""effectwatch.pydantic_ai in Pydantic AI's own agent run, driven by its
`FunctionModel`: no network, no API key."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from effectwatch import Ledger
from effectwatch.pydantic_ai import as_tool
from framework_refunds import DESCRIPTION, Refunds


class Script:
    """Asks for each scripted call in turn, one tool call a turn, then
    answers "done". It reads back what every tool result told it, and how
    (`outcomes`: success, failed, retried)."""

    def __init__(self, tool: str, calls: list[dict[str, Any]]) -> None:
        self.tool = tool
        self.calls = calls
        self.told: list[str] = []
        self.outcomes: list[str] = []
        self.tools: list[ToolDefinition] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tools = info.function_tools
        results = [
            part for message in messages if isinstance(message, ModelRequest)
            for part in message.parts if isinstance(part, ToolReturnPart)
        ]
        self.told = [part.model_response_str(wrap_if_error=False) for part in results]
        self.outcomes = [part.outcome for part in results]
        step = len(results)
        if step < len(self.calls):
            return ModelResponse(parts=[ToolCallPart(self.tool, self.calls[step], tool_call_id=f"call-{step}")])
        return ModelResponse(parts=[TextPart("done")])


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_pydantic_ai_agent_is_told_and_refunds_once(
    database_url: str, provider_url: str, unique: str, mode: str
) -> None:
    refunds = Refunds(database_url, provider_url, unique, mode)
    script = Script("refund", refunds.calls())
    agent = Agent(FunctionModel(script), tools=[as_tool(refunds.tool())], instructions="You refund orders.")
    # The run completes: no refusal escapes the tool as an exception.
    result = await agent.run("Refund the orders")

    assert result.output == "done"
    # A refusal is a failed result, which spends no retry: never ModelRetry.
    assert script.outcomes == ["success", "success", "failed", "failed", "failed"]
    refunds.check(script.told)

    [tool] = script.tools
    assert (tool.name, tool.description) == ("refund", DESCRIPTION)
    assert set(tool.parameters_json_schema["properties"]) == {"order_id", "amount_minor", "currency"}
    assert tool.parameters_json_schema["properties"]["amount_minor"]["type"] == "integer"


async def test_a_bad_argument_asks_the_model_to_call_again(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    done: list[str] = []

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency")
    def refund(order_id: str, amount_minor: int | str, currency: str) -> dict[str, Any]:
        """Refund an order."""
        done.append(order_id)
        return {"id": f"re_{order_id}"}

    order = f"PA-{unique}"
    script = Script("refund", [
        {"order_id": order, "amount_minor": "15.00", "currency": "EUR"},  # not a whole number of minor units
        {"order_id": order, "amount_minor": "1500", "currency": "EUR"},
    ])
    result = await Agent(FunctionModel(script), tools=[as_tool(refund)]).run("Refund the order")

    assert result.output == "done"
    assert script.outcomes == ["retried", "success"]
    assert script.told[0].startswith("refund was not called: argument amount_minor must be a whole number")
    assert done == [order]
