"""A ledger tool as an OpenAI Agents SDK tool (`pip install "effectwatch[openai-agents]"`).

    from agents import Agent
    from effectwatch.openai_agents import as_tool

    agent = Agent(name="refunds", instructions="...", tools=[as_tool(refund)])

The tool is the SDK's own `function_tool`: its name, docstring (the
description, with the SDK's reading of argument descriptions) and argument
schema are the function's. Its `failure_error_function` answers every
error with the text of `effectwatch.told` — a refused call, an outcome not
known, arguments the schema refuses — instead of the SDK's default ("An
error occurred while running the tool. Please try again.", which invites a
second refund). A replay answers the stored result.
"""

from __future__ import annotations

from typing import Any, Callable

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.exceptions import ModelBehaviorError

from .told import told


def answer_for(tool_name: str) -> Callable[[RunContextWrapper[Any], Exception], str]:
    """The tool's `failure_error_function`: what the model is told of an
    error its call raised."""

    def answer(context: RunContextWrapper[Any], error: Exception) -> str:
        if isinstance(error, ModelBehaviorError):  # the SDK's own: arguments its schema refuses
            return (
                f"{tool_name} was not called: {' '.join(str(error).split())}. "
                "Nothing was done; call it again with arguments that fit its schema."
            )
        return told(tool_name, error).text

    return answer


def as_tool(
    tool: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> FunctionTool:
    """`tool` (decorated by `Ledger.tool` or `AsyncLedger.tool`, or a
    wrapper of one) as a `FunctionTool`. `options` go to `function_tool`
    (`strict_mode`, `needs_approval`, `timeout`, ...). A call the SDK
    stops at its `timeout` may have reached the provider, and its answer
    says so (unless `timeout_error_function` is given)."""
    tool_name = name or getattr(tool, "__name__", None)
    if not tool_name:
        raise ValueError(f"{tool!r} has no name: pass name=")
    options.setdefault("timeout_error_function", timed_out(tool_name))
    return function_tool(
        tool,
        name_override=name,
        description_override=description,
        failure_error_function=answer_for(tool_name),
        **options,
    )


def timed_out(tool_name: str) -> Callable[[RunContextWrapper[Any], Exception], str]:
    def answer(context: RunContextWrapper[Any], error: Exception) -> str:
        return (
            f"{tool_name} did not answer in time ({' '.join(str(error).split())}) and may have been performed. "
            f"Do not call {tool_name} again for this action, with these or other arguments or under another "
            "key: the reconciler or an operator settles it. Tell the user it is being checked."
        )

    return answer
