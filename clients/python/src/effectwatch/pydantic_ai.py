"""A ledger tool as a Pydantic AI tool (`pip install "effectwatch[pydantic-ai]"`).

    from pydantic_ai import Agent
    from effectwatch.pydantic_ai import as_tool

    agent = Agent(model, tools=[as_tool(refund)])

The tool is Pydantic AI's own `Tool`: its name, docstring (the description)
and argument schema are the function's. A call the ledger refuses, or whose
outcome is not known, raises `ToolFailed` with the text of
`effectwatch.told`: the model sees it as the tool's failed result, and it
spends no retry. Only arguments that cannot make the key or the amount
(`BadArgument`) raise `ModelRetry`, the one case where calling again with
other arguments is right; past the tool's `max_retries` Pydantic AI ends the
run, as it does for arguments its schema refuses. A replay answers the
stored result.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Awaitable, Callable, cast

from pydantic_ai import ModelRetry, Tool, ToolFailed

from .told import told


def refusal(tool_name: str, error: Exception) -> ModelRetry | ToolFailed:
    """The exception Pydantic AI hands the model for `error`."""
    answer = told(tool_name, error)
    if answer.retry_with_other_arguments:
        return ModelRetry(answer.text)
    return ToolFailed(answer.text)


def as_tool(
    tool: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> Tool[Any]:
    """`tool` (decorated by `Ledger.tool` or `AsyncLedger.tool`, or a
    wrapper of one) as a `Tool` taking no run context. `options` go to
    `Tool` (`max_retries`, `requires_approval`, `timeout`, ...)."""
    tool_name = name or getattr(tool, "__name__", None)
    if not tool_name:
        raise ValueError(f"{tool!r} has no name: pass name=")

    if inspect.iscoroutinefunction(tool):
        run_async = cast(Callable[..., Awaitable[Any]], tool)

        @functools.wraps(tool)
        async def answer_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await run_async(*args, **kwargs)
            except Exception as error:
                raise refusal(tool_name, error) from error

        return Tool(answer_async, takes_ctx=False, name=tool_name, description=description, **options)

    @functools.wraps(tool)
    def answer(*args: Any, **kwargs: Any) -> Any:
        try:
            return tool(*args, **kwargs)
        except Exception as error:
            raise refusal(tool_name, error) from error

    return Tool(answer, takes_ctx=False, name=tool_name, description=description, **options)
