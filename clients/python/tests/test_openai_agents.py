"""effectwatch.openai_agents in the OpenAI Agents SDK's own loop
(`Runner.run`), driven by a scripted `Model`: no network, no API key."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Mapping, cast

import pytest
from agents import Agent, FunctionTool, ModelSettings, RunConfig, Runner, Tool, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_prompt_param import ResponsePromptParam

from effectwatch import Ledger
from effectwatch.openai_agents import as_tool
from framework_refunds import DESCRIPTION, Refunds


def text_answer(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg-done", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """Asks for each scripted call in turn, one tool call a turn, then
    answers "done". It reads back what every tool result told it."""

    def __init__(self, tool: str, calls: list[dict[str, Any]]) -> None:
        self.tool = tool
        self.calls = calls
        self.told: list[str] = []
        self.tools: list[Tool] = []

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
        self.tools = tools
        items = [cast(Mapping[str, Any], item) for item in ([] if isinstance(input, str) else input)]
        self.told = [str(item["output"]) for item in items if item.get("type") == "function_call_output"]
        step = len(self.told)
        if step < len(self.calls):
            output: list[Any] = [ResponseFunctionToolCall(
                type="function_call", call_id=f"call-{step}", name=self.tool, arguments=json.dumps(self.calls[step]),
            )]
        else:
            output = [text_answer("done")]
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
        raise NotImplementedError("the tests run the agent without streaming")


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_an_openai_agent_is_told_and_refunds_once(
    database_url: str, provider_url: str, unique: str, mode: str
) -> None:
    refunds = Refunds(database_url, provider_url, unique, mode)
    model = ScriptedModel("refund", refunds.calls())
    agent = Agent(name="refunds", instructions="You refund orders.", model=model, tools=[as_tool(refunds.tool())])
    # The run completes: no refusal escapes the tool as an exception.
    result = await Runner.run(agent, "Refund the orders", run_config=RunConfig(tracing_disabled=True))

    assert result.final_output == "done"
    refunds.check(model.told)

    [tool] = model.tools
    assert isinstance(tool, FunctionTool)
    assert (tool.name, tool.description) == ("refund", DESCRIPTION)
    assert set(tool.params_json_schema["properties"]) == {"order_id", "amount_minor", "currency"}
    assert tool.params_json_schema["properties"]["amount_minor"]["type"] == "integer"


async def test_a_bad_argument_and_a_misfit_are_told_not_raised(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    done: list[str] = []

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency")
    def refund(order_id: str, amount_minor: int | str, currency: str) -> dict[str, Any]:
        """Refund an order."""
        done.append(order_id)
        return {"id": f"re_{order_id}"}

    order = f"OA-{unique}"
    model = ScriptedModel("refund", [
        {"order_id": order, "amount_minor": "15.00", "currency": "EUR"},  # not a whole number of minor units
        {"order_id": order, "amount_minor": [1500], "currency": "EUR"},  # not what the schema takes
        {"order_id": order, "amount_minor": "1500", "currency": "EUR"},
    ])
    agent = Agent(name="refunds", instructions="You refund orders.", model=model, tools=[as_tool(refund)])
    result = await Runner.run(agent, "Refund the order", run_config=RunConfig(tracing_disabled=True))

    assert result.final_output == "done"
    bad, misfit, done_answer = model.told
    assert bad.startswith("refund was not called: argument amount_minor must be a whole number"), bad
    assert misfit.startswith("refund was not called") and "schema" in misfit, misfit
    assert "re_" in done_answer and done == [order]
