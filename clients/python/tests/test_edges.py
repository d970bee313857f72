"""The decorator's edges: where the provider call starts (`validate=`, a
function that takes its `Effect`), waiting for a call in flight, keys made
by functions, a wrapper around a tool in the replay set, and what a model
is told of each way a call ends (`effectwatch.told`)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

import pytest

from agent import post_refund
from effectwatch import (
    AsyncEffect,
    AsyncLedger,
    BadArgument,
    BusinessRejection,
    Effect,
    InFlight,
    Ledger,
    Misuse,
    RateLimited,
    Stop,
)
from effectwatch.testing import CRASH, LATE, LOST, REOPEN, replay_set
from effectwatch.told import told
from test_client import attempts_of, effect_row, provider_calls


def test_validate_refuses_before_dispatch_and_the_key_stays_retryable(
    database_url: str, provider_url: str, unique: str
) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    verified: set[str] = set()

    def customer_verified(order_id: str, amount_minor: int) -> None:
        if order_id not in verified:
            raise ValueError(f"the customer of {order_id} is not verified")

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                 validate=customer_verified)
    def refund(order_id: str, amount_minor: int) -> dict[str, Any]:
        return post_refund(provider_url, f"refund:{order_id}", {"amount_minor": amount_minor})

    order = f"VA-{unique}"
    with pytest.raises(ValueError, match="not verified") as refused:
        refund(order, 1500)
    row = effect_row(database_url, f"refund:{order}")
    assert (row["state"], row["retryable"], row["dispatched_at"]) == ("failed", True, None)
    assert provider_calls(provider_url, f"refund:{order}") == 0
    assert told("refund", refused.value).kind == "not_done"
    assert "the provider was not called" in told("refund", refused.value).text

    verified.add(order)
    assert refund(order, 1500)["id"] == f"re_refund:{order}"
    assert effect_row(database_url, f"refund:{order}")["state"] == "succeeded"
    assert provider_calls(provider_url, f"refund:{order}") == 1


def test_without_a_dispatch_point_the_bodys_own_error_is_maybe_done(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    def refund(order_id: str) -> None:
        raise ValueError("the customer is not verified")  # before any provider call, but the ledger cannot know

    order = f"ND-{unique}"
    with pytest.raises(ValueError) as raised:
        refund(order)
    assert effect_row(database_url, f"refund:{order}")["state"] == "unknown"
    assert told("refund", raised.value).kind == "maybe_done"
    with pytest.raises(InFlight):
        refund(order)


def test_a_tool_that_takes_its_effect_says_where_the_provider_call_starts(
    database_url: str, provider_url: str, unique: str
) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    verified: set[str] = set()
    provider: dict[str, Any] = {"behave": None}

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency", dispatch="manual")
    def refund(effect: Effect, order_id: str, amount_minor: int, currency: str) -> dict[str, Any]:
        """Refund an order."""
        if order_id not in verified:
            raise ValueError("the customer is not verified")  # before dispatched(): failed, retryable
        effect.dispatched()
        return post_refund(provider_url, f"refund:{order_id}", {"amount_minor": amount_minor, **provider})

    # The effect is not an argument of the call: the signature a framework
    # reads, the key and the params are the business arguments only.
    assert list(inspect.signature(refund).parameters) == ["order_id", "amount_minor", "currency"]
    assert "effect" not in refund.__annotations__
    order, lost = f"ME-{unique}", f"ME-{unique}-L"
    assert set(ledger.intent_of(refund, order_id=order, amount_minor=1, currency="EUR").params) == {
        "order_id", "amount_minor", "currency",
    }

    with pytest.raises(ValueError):
        refund(order, 1500, "EUR")
    row = effect_row(database_url, f"refund:{order}")
    assert (row["state"], row["retryable"], row["dispatched_at"]) == ("failed", True, None)
    verified.update({order, lost})
    first = refund(order, 1500, "EUR")
    assert refund(order, 1500, "EUR") == first  # a replay does not run the function
    assert provider_calls(provider_url, f"refund:{order}") == 1

    provider["behave"] = "drop"  # after dispatched(): unknown
    with pytest.raises(ConnectionError) as dropped:
        refund(lost, 900, "EUR")
    assert effect_row(database_url, f"refund:{lost}")["state"] == "unknown"
    assert told("refund", dropped.value).kind == "maybe_done"


async def test_an_asyncio_tool_that_takes_its_effect(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test")
    sent: list[str] = []

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}", dispatch="manual")
    async def refund(effect: AsyncEffect, order_id: str) -> dict[str, Any]:
        if order_id.endswith("-BAD"):
            raise ValueError("no such order")
        await effect.dispatched()
        sent.append(order_id)
        return {"id": f"re_{order_id}"}

    assert list(inspect.signature(refund).parameters) == ["order_id"]
    with pytest.raises(ValueError):
        await refund(f"MA-{unique}-BAD")
    assert effect_row(database_url, f"refund:MA-{unique}-BAD")["state"] == "failed"
    assert await refund(f"MA-{unique}") == await refund(order_id=f"MA-{unique}")
    assert sent == [f"MA-{unique}"]


def test_an_effect_parameter_is_checked_when_declared(database_url: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    with pytest.raises(ValueError, match="annotate it Effect"):

        # The mistake under test, which mypy sees too.
        @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",  # type: ignore[arg-type]
                     dispatch="manual")
        def refund(effect: AsyncEffect, order_id: str) -> None:
            pass

    with pytest.raises(ValueError, match="say dispatch='manual'"):

        @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
        def refund_too(order_id: str, effect: Effect) -> None:
            pass


def slow_refund(ledger: Ledger, provider_url: str, wait: float | None) -> Callable[..., dict[str, Any]]:
    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}", wait_in_flight=wait)
    def refund(order_id: str, delay: float) -> dict[str, Any]:
        return post_refund(provider_url, f"refund:{order_id}", {"behave": "slow", "delay": delay})

    return refund


def test_a_caller_may_wait_for_the_call_in_flight(database_url: str, provider_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    first_caller = slow_refund(ledger, provider_url, None)
    impatient, patient = slow_refund(ledger, provider_url, None), slow_refund(ledger, provider_url, 10.0)
    order = f"WI-{unique}"
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(first_caller(order, 1.0)))
    thread.start()
    while effect_row_or_none(database_url, f"refund:{order}") is None:
        time.sleep(0.02)
    with pytest.raises(InFlight):
        impatient(order, 1.0)
    waited = patient(order, 1.0)  # waits for the first caller, then replays its result
    thread.join()
    assert waited == answers[0]
    assert provider_calls(provider_url, f"refund:{order}") == 1
    kinds = [kind for kind, _ in attempts_of(database_url, f"refund:{order}")]
    assert kinds.count("replay") == 1, kinds


def test_waiting_is_bounded_and_an_unknown_key_is_answered_at_once(
    database_url: str, provider_url: str, unique: str
) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    order = f"WB-{unique}"
    thread = threading.Thread(target=lambda: slow_refund(ledger, provider_url, None)(order, 2.0))
    thread.start()
    while effect_row_or_none(database_url, f"refund:{order}") is None:
        time.sleep(0.02)
    started = time.monotonic()
    with pytest.raises(InFlight):
        slow_refund(ledger, provider_url, 0.4)(order, 2.0)
    assert 0.4 <= time.monotonic() - started < 1.5
    thread.join()

    unknown = f"refund:WU-{unique}"
    with pytest.raises(ConnectionError):
        with ledger.effect(unknown, action="refund", target=f"invoice:WU-{unique}", params={}) as e:
            e.dispatched()
            raise ConnectionResetError("the reply was lost")
    started = time.monotonic()
    with pytest.raises(InFlight):
        with ledger.effect(unknown, action="refund", target=f"invoice:WU-{unique}", params={}, wait_in_flight=5.0):
            pass
    assert time.monotonic() - started < 1.0, "an unknown effect is not waited for: waiting does not settle it"


async def test_an_asyncio_caller_may_wait_for_the_call_in_flight(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test")
    sent: list[str] = []

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}", wait_in_flight=5.0)
    async def refund(order_id: str) -> dict[str, Any]:
        sent.append(order_id)
        await asyncio.sleep(0.5)
        return {"id": f"re_{order_id}"}

    order = f"AW-{unique}"
    first, second = await asyncio.gather(refund(order), refund(order))
    assert first == second == {"id": f"re_{order}"}
    assert sent == [order]


def effect_row_or_none(database_url: str, op_key: str) -> dict[str, Any] | None:
    try:
        return effect_row(database_url, op_key)
    except AssertionError:
        return None


def test_op_key_and_target_may_be_functions_of_the_arguments(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    received: list[tuple[str, int]] = []

    @ledger.tool(action="refund", op_key=lambda order_id, amount_minor: f"refund:{order_id}:{amount_minor}",
                 target=lambda order_id: f"invoice:{order_id}", normalise={"order_id": ("trim", "upper")},
                 amount_minor="amount_minor", currency="currency")
    def refund(order_id: str, amount_minor: int | float | str, currency: str = "EUR") -> dict[str, Any]:
        received.append((order_id, int(amount_minor)))
        return {"id": f"re_{order_id}"}

    order = f"KF-{unique}".upper()
    # The functions get the canonical arguments: normalised, money an integer.
    intent = ledger.intent_of(refund, order_id=f" {order.lower()} ", amount_minor="01500")
    assert (intent.op_key, intent.target) == (f"refund:{order}:1500", f"invoice:{order}")
    first = refund(f" {order.lower()} ", "01500")
    assert refund(order, 1500.0) == first
    assert received == [(order, 1500)]

    @ledger.tool(action="refund", op_key=lambda order_id: order_id.strip("-"), target="invoice:{order_id}")
    def blank(order_id: str) -> None:
        pass

    with pytest.raises(BadArgument, match="op_key of blank made ''"):
        blank("---")

    with pytest.raises(ValueError, match="takes tool_call_id"):
        ledger.tool(action="refund", op_key=lambda tool_call_id: tool_call_id, target="invoice:{order_id}")(blank)
    with pytest.raises(ValueError, match="names no argument"):
        ledger.tool(action="refund", op_key=lambda: "refund:constant", target="invoice:{order_id}")(blank)
    with pytest.raises(TypeError, match="template string or a function"):
        ledger.tool(action="refund", op_key=42, target="invoice:{order_id}")(blank)  # type: ignore[call-overload]


def test_the_replay_set_follows_a_wrapper_to_its_tool(database_url: str, provider_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-replay-wrapper")
    behaviour: dict[str, str | None] = {"behave": None}

    @ledger.tool(action="refund", op_key="refund:{order_id}:{approval}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency")
    def refund(order_id: str, approval: str, amount_minor: int, currency: str) -> dict[str, Any]:
        return post_refund(provider_url, f"refund:{order_id}:{approval}",
                           {"amount_minor": amount_minor, "behave": behaviour["behave"], "timeout": 2})

    @functools.wraps(refund)
    def logged_refund(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return refund(*args, **kwargs)  # the wrapper an agent's code puts around its tool

    @contextmanager
    def lose_reply() -> Iterator[None]:
        behaviour["behave"] = "drop"
        try:
            yield
        finally:
            behaviour["behave"] = None

    def order(suffix: str, amount_minor: int = 1500) -> dict[str, Any]:
        return {"order_id": f"RW-{unique}-{suffix}", "approval": "AP-1", "amount_minor": amount_minor, "currency": "EUR"}

    def calls(arguments: Mapping[str, Any]) -> int:
        return provider_calls(provider_url, f"refund:{arguments['order_id']}:{arguments['approval']}")

    report = replay_set(logged_refund, same=order("A"), changed=order("A", 2500), distinct=[order("B"), order("C")],
                        provider_calls=calls, ledger=ledger, crashed=order("K"), lost=order("L"), lose_reply=lose_reply)
    assert report.all_held, str(report)
    assert {CRASH, LOST, LATE, REOPEN} <= {line.check for line in report.lines}


def test_each_line_of_the_report_is_one_line(unique: str) -> None:
    deliveries = 8
    def refused(order_id: str) -> dict[str, Any]:
        # Not a ledger tool: it refuses every concurrent delivery, in the
        # same words, and answers the rest.
        if order_id.endswith("-C"):
            raise Stop(f"refund:{order_id}", "failed", None)
        return {"id": f"re_{order_id}"}

    report = replay_set(
        refused, same={"order_id": f"OL-{unique}"}, changed={"order_id": f"OL-{unique}"},
        distinct=[{"order_id": f"OL-{unique}-B"}], provider_calls=lambda arguments: 1,
        concurrent={"order_id": f"OL-{unique}-C"}, deliveries=deliveries,
    )
    text = str(report)
    assert len(text.splitlines()) == len(report.lines), text
    concurrency = next(line for line in report.lines if line.check == f"{deliveries} deliveries at once act once")
    assert concurrency.detail.startswith(f"{deliveries}x Stop: refund:OL-{unique}-C is closed"), concurrency.detail
    assert concurrency.detail.count("is closed") == 1


def test_what_a_model_is_told_of_each_ending(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    assert told("refund", BadArgument("amount_minor", "no")).retry_with_other_arguments
    in_flight = told("refund", InFlight("refund:X", "unknown"))
    assert in_flight.kind == "refused" and not in_flight.retry_with_other_arguments
    unclear = told("refund", OSError("database unreachable"))
    assert unclear.kind == "unclear" and "not known whether it was performed" in unclear.text

    def ended(key: str, error: Exception, *, dispatch: bool) -> Exception:
        try:
            with ledger.effect(key, action="refund", target=f"invoice:{key}", params={}) as e:
                if dispatch:
                    e.dispatched()
                raise error
        except Exception as raised:
            return raised
        raise AssertionError("the block did not raise")

    rejected = told("refund", ended(f"refund:TB-{unique}", BusinessRejection("card closed"), dispatch=True))
    assert rejected.kind == "not_done" and "refused it for good" in rejected.text and "Do not call" in rejected.text
    limited = told("refund", ended(f"refund:TR-{unique}", RateLimited(7), dispatch=True))
    assert limited.kind == "not_done" and "after 7 seconds" in limited.text
    reset = told("refund", ended(f"refund:TU-{unique}", ConnectionResetError("reset"), dispatch=True))
    assert reset.maybe_performed and f"refund:TU-{unique}" in reset.text
    before = told("refund", ended(f"refund:TN-{unique}", KeyError("customer"), dispatch=False))
    assert before.kind == "not_done" and "may be made again" in before.text

    # A wrapper that turns the error into another is followed to the mark.
    try:
        try:
            raise ended(f"refund:TW-{unique}", TimeoutError("no answer"), dispatch=True)
        except TimeoutError as inner:
            raise RuntimeError("the refund tool failed") from inner
    except RuntimeError as outer:
        assert told("refund", outer).maybe_performed


def test_a_success_recorded_without_dispatch_is_told_maybe_done(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    key = f"refund:TM-{unique}"
    try:
        with ledger.effect(key, action="refund", target=f"invoice:{key}", params={}) as e:
            e.succeeded("re_tm")  # the provider may have been reached unclaimed: recorded unknown
    except Misuse as misuse:
        answer = told("refund", misuse)
    assert answer.maybe_performed, answer.text
    assert effect_row(database_url, key)["state"] == "unknown"


def test_the_adapters_show_a_manual_tool_without_its_effect(database_url: str) -> None:
    from effectwatch.langchain import as_tool as langchain_tool
    from effectwatch.openai_agents import as_tool as openai_agents_tool
    from effectwatch.pydantic_ai import as_tool as pydantic_ai_tool

    ledger, async_ledger = Ledger(database_url, requested_by="agent-test"), AsyncLedger(database_url, requested_by="a")

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}", dispatch="manual")
    def refund(effect: Effect, order_id: str, amount_minor: int) -> None:
        """Refund an order."""

    @async_ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}", dispatch="manual")
    async def refund_async(effect: AsyncEffect, order_id: str, amount_minor: int) -> None:
        """Refund an order."""

    for tool in (refund, refund_async):
        assert set(langchain_tool(tool).args) == {"order_id", "amount_minor"}
        assert set(openai_agents_tool(tool).params_json_schema["properties"]) == {"order_id", "amount_minor"}
        schema = pydantic_ai_tool(tool).function_schema.json_schema
        assert set(schema["properties"]) == {"order_id", "amount_minor"}
