"""A ledger tool as a LangChain tool (`pip install "effectwatch[langchain]"`).

    from effectwatch.langchain import as_tool

    @ledger.tool(action="refund", op_key="refund:{order_id}:{approval}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency", provider="payments")
    def refund(order_id: str, approval: str, amount_minor: int, currency: str) -> dict[str, Any]:
        \"\"\"Refund an order, once.\"\"\"
        ...

    agent = create_agent(model, tools=[as_tool(refund)])

The tool keeps the function's name, docstring (its description) and
argument schema. A call the ledger refuses, or whose outcome is not known,
raises `ToolException` with the text of `effectwatch.told`, which the tool
hands to the model as its answer (`handle_tool_error`, a `ToolMessage` of
status "error"); arguments that do not fit the schema are answered the same
way (`handle_validation_error`). A replay answers the stored result.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Awaitable, Callable, cast

from langchain_core.tools import StructuredTool, ToolException
from pydantic import ValidationError

from .told import Told, told


class Refused(ToolException):
    """The tool's call did not return a result: `.told` says what the model
    is told (its kind and text)."""

    def __init__(self, answer: Told) -> None:
        super().__init__(answer.text)
        self.told = answer


def misfits(error: ValidationError | Any) -> str:
    """A validation error in one line: each argument and what is wrong with it."""
    if isinstance(error, ValidationError):
        return "; ".join(
            f"{'.'.join(map(str, problem['loc'])) or 'arguments'}: {problem['msg']} (got {problem.get('input')!r})"
            for problem in error.errors()
        )
    return " ".join(str(error).split())


def description_of(tool: Callable[..., Any], description: str | None) -> str:
    found = description if description is not None else inspect.getdoc(tool)
    if not found:
        raise ValueError(
            f"{getattr(tool, '__name__', tool)!r} has no docstring: the model reads it as the tool's description; "
            "write one or pass description="
        )
    return found


def as_tool(
    tool: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> StructuredTool:
    """`tool` (decorated by `Ledger.tool` or `AsyncLedger.tool`, or a
    wrapper of one) as a `StructuredTool`. `options` go to
    `StructuredTool.from_function` (`return_direct`, `tags`, ...)."""
    tool_name = name or getattr(tool, "__name__", None)
    if not tool_name:
        raise ValueError(f"{tool!r} has no name: pass name=")
    text = description_of(tool, description)

    def invalid(error: ValidationError | Any) -> str:
        return (
            f"{tool_name} was not called: its arguments do not fit the tool's schema ({misfits(error)}). "
            "Nothing was done; call it again with arguments that fit."
        )

    if inspect.iscoroutinefunction(tool):
        run_async = cast(Callable[..., Awaitable[Any]], tool)

        @functools.wraps(tool)
        async def answer_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await run_async(*args, **kwargs)
            except Exception as error:
                raise Refused(told(tool_name, error)) from error

        return StructuredTool.from_function(
            coroutine=answer_async,
            name=tool_name,
            description=text,
            handle_tool_error=True,
            handle_validation_error=invalid,
            **options,
        )

    @functools.wraps(tool)
    def answer(*args: Any, **kwargs: Any) -> Any:
        try:
            return tool(*args, **kwargs)
        except Exception as error:
            raise Refused(told(tool_name, error)) from error

    return StructuredTool.from_function(
        func=answer,
        name=tool_name,
        description=text,
        handle_tool_error=True,
        handle_validation_error=invalid,
        **options,
    )
