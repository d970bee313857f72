"""A LangChain agent whose refund tool records each refund in the effectwatch
ledger before making it. The model asks for a refund, the same refund again
(a replay: the provider is not called twice), the same refund with another
amount (refused: the model is told why), and a refund whose reply is lost
after the provider made it (the model is told it may have happened and not
to retry; asking again is answered "in flight").

    pip install "effectwatch[langchain]" langchain
    EFFECTWATCH_DATABASE_URL=postgres://agent@db/payments python examples/langchain_refund.py

The model is scripted and the provider is effectwatch.testing.FakePayments,
so it runs without an API key; with a real model, pass it to create_agent
(`create_agent("openai:gpt-5", ...)`) and drop the stand-ins below.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any, Sequence

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

from effectwatch import Ledger
from effectwatch.langchain import as_tool
from effectwatch.testing import FakePayments

payments = FakePayments()  # your provider's client


def main(database_url: str) -> None:
    ledger = Ledger(database_url, requested_by="langchain-refund-agent")

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency", provider="payments")
    def refund(order_id: str, amount_minor: int, currency: str) -> dict[str, Any]:
        """Refund an order's amount, in minor units of its currency, to the customer."""
        return payments.refund(order_id, amount_minor, currency, idempotency_key=f"refund:{order_id}")

    run = uuid.uuid4().hex[:6].upper()
    order, lost = f"LC-{run}", f"LC-{run}-LOST"
    payments.lose_replies_for.add(lost)  # the provider makes this refund, then the connection drops
    model = ScriptedChatModel(calls=[
        {"order_id": order, "amount_minor": 1500, "currency": "EUR"},
        {"order_id": order, "amount_minor": 1500, "currency": "EUR"},
        {"order_id": order, "amount_minor": 2500, "currency": "EUR"},
        {"order_id": lost, "amount_minor": 900, "currency": "EUR"},
        {"order_id": lost, "amount_minor": 900, "currency": "EUR"},
    ])

    agent = create_agent(model, tools=[as_tool(refund)], system_prompt="You refund orders.")
    state = agent.invoke({"messages": [HumanMessage(f"Refund orders {order} and {lost}.")]})

    for message in state["messages"]:
        if isinstance(message, ToolMessage):
            print(f"told ({message.status}): {message.text}")
    for key in (f"refund:{order}", f"refund:{lost}"):
        print(f"provider made {payments.refunds_for(key)} refund for {key}")
    print(f"agent: {state['messages'][-1].text}")


class ScriptedChatModel(BaseChatModel):
    """A stand-in for a chat model: asks for each scripted tool call in
    turn, then answers "done"."""

    calls: list[dict[str, Any]]

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        step = sum(isinstance(message, ToolMessage) for message in messages)
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
        return self


if __name__ == "__main__":
    url = os.environ.get("EFFECTWATCH_DATABASE_URL")
    if not url:
        sys.exit("set EFFECTWATCH_DATABASE_URL to a ledger's database (one `effectwatch migrate` installed)")
    main(url)
