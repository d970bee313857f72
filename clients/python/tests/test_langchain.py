"""effectwatch.langchain in LangChain's own agent loop (`create_agent`),
driven by a scripted chat model: no network, no API key."""

from __future__ import annotations

from typing import Any, Sequence

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.types import InputAgentState
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from effectwatch.langchain import as_tool
from framework_refunds import DESCRIPTION, Refunds


class ScriptedChatModel(BaseChatModel):
    """Asks for each scripted refund in turn, one tool call a turn, then
    answers "done". It reads back what every tool result told it."""

    calls: list[dict[str, Any]]
    told: list[str] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.told = [message.text for message in messages if isinstance(message, ToolMessage)]
        step = len(self.told)
        if step < len(self.calls):
            answer = AIMessage(content="", tool_calls=[{"name": "refund", "args": self.calls[step], "id": f"call-{step}"}])
        else:
            answer = AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=answer)])

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Any | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        self.tools = [convert_to_openai_tool(tool) for tool in tools]
        return self


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_langchain_agent_is_told_and_refunds_once(
    database_url: str, provider_url: str, unique: str, mode: str
) -> None:
    refunds = Refunds(database_url, provider_url, unique, mode)
    model = ScriptedChatModel(calls=refunds.calls())
    agent = create_agent(model, tools=[as_tool(refunds.tool())], system_prompt="You refund orders.")
    question: InputAgentState = {"messages": [HumanMessage("Refund the orders")]}
    # The run completes: no refusal escapes the tool as an exception.
    state = agent.invoke(question) if mode == "sync" else await agent.ainvoke(question)

    messages = state["messages"]
    assert messages[-1].text == "done"
    results = [message for message in messages if isinstance(message, ToolMessage)]
    assert [message.status for message in results] == ["success", "success", "error", "error", "error"]
    assert model.told == [message.text for message in results]
    refunds.check(model.told)

    [schema] = model.tools
    assert schema["function"]["name"] == "refund"
    assert schema["function"]["description"] == DESCRIPTION
    parameters = schema["function"]["parameters"]
    assert set(parameters["properties"]) == {"order_id", "amount_minor", "currency"}
    assert parameters["properties"]["amount_minor"]["type"] == "integer"
    assert set(parameters["required"]) == {"order_id", "amount_minor", "currency"}


def test_arguments_the_schema_refuses_are_told_not_raised(database_url: str, provider_url: str, unique: str) -> None:
    refunds = Refunds(database_url, provider_url, unique, "sync")
    tool = as_tool(refunds.tool())
    answer = tool.invoke(
        {"name": "refund", "args": {"order_id": refunds.order, "amount_minor": 15.5, "currency": "EUR"},
         "id": "call-1", "type": "tool_call"}
    )
    assert isinstance(answer, ToolMessage) and answer.status == "error"
    assert "refund was not called" in answer.text and "amount_minor" in answer.text and "Nothing was done" in answer.text
    assert "\n" not in answer.text


def test_a_tool_without_a_docstring_is_refused_when_adapted(database_url: str) -> None:
    from effectwatch import Ledger

    ledger = Ledger(database_url, requested_by="agent-test")

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    def refund(order_id: str) -> None:
        pass

    with pytest.raises(ValueError, match="no docstring"):
        as_tool(refund)
    assert as_tool(refund, description="Refund an order.").description == "Refund an order."
