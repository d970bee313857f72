"""The client's promises against a real ledger and a real provider process:
what reaches the provider, and what the ledger records, for each way a call
can end."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from agent import post_refund, refund_tool
from effectwatch import AsyncLedger, Ledger, NotPerformed, Rejected, Wait


def provider_calls(provider_url: str, key: str) -> int:
    with urllib.request.urlopen(f"{provider_url}/calls/{key}") as response:
        calls: int = json.loads(response.read())["calls"]
        return calls


def effect_row(database_url: str, op_key: str) -> dict[str, Any]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as connection:
        row = connection.execute(
            "select e.*, exists (select 1 from ledger.unknown_outcomes u where u.op_key = e.op_key) as in_unknown_pane"
            " from ledger.effects e where op_key = %s",
            (op_key,),
        ).fetchone()
    assert row is not None, f"no effect {op_key}"
    return row


def test_the_same_call_twice_calls_the_provider_once(database_url: str, provider_url: str, unique: str) -> None:
    refund = refund_tool(Ledger(database_url, requested_by="agent-test"), provider_url)
    first = refund(f"ORD-{unique}", "AP-1", 1500, "EUR")
    second = refund(f"ORD-{unique}", "AP-1", 1500, "EUR")
    assert second == first
    assert provider_calls(provider_url, f"refund:ORD-{unique}:AP-1") == 1
    row = effect_row(database_url, f"refund:ORD-{unique}:AP-1")
    assert (row["state"], row["external_ref"], row["target"]) == ("succeeded", first["id"], f"invoice:ORD-{unique}")


def test_a_stored_result_round_trips(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    stored = {
        "refund": {"id": "re_1", "lines": [{"sku": "A-1", "qty": 2, "price": "19.99"}, {"sku": "B", "qty": 1}]},
        "fee": "0.30",
        "created_at": "2026-12-05T02:10:00.123456+00:00",
        "flags": [True, False, None],
        "unicode": "Zürich — 東京",
    }
    params = {"amount_minor": 4300, "currency": "EUR"}
    with ledger.effect(f"refund:RT-{unique}", action="refund", target=f"invoice:RT-{unique}", params=params) as e:
        e.dispatched()
        e.succeeded("re_1", stored)
    ran = False
    with ledger.effect(f"refund:RT-{unique}", action="refund", target=f"invoice:RT-{unique}", params=params) as again:
        again.dispatched()
        ran = True
    assert not ran, "a replay ran the block past dispatched()"
    assert again.replayed
    assert again.result == stored


@pytest.mark.parametrize("behave, error_class", [("drop", "connection_reset"), ("500", "server_error")])
def test_an_exception_after_dispatch_records_unknown(
    database_url: str, provider_url: str, unique: str, behave: str, error_class: str
) -> None:
    refund = refund_tool(Ledger(database_url, requested_by="agent-test"), provider_url, behave)
    with pytest.raises(Exception):
        refund(f"ORD-{unique}", "AP-1", 900, "EUR")
    row = effect_row(database_url, f"refund:ORD-{unique}:AP-1")
    assert (row["state"], row["error_class"], row["in_unknown_pane"]) == ("unknown", error_class, True)


def test_a_timeout_after_dispatch_records_unknown(database_url: str, provider_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    key, target = f"refund:TO-{unique}", f"invoice:TO-{unique}"
    with pytest.raises(TimeoutError):
        with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as e:
            e.dispatched()
            post_refund(provider_url, key, {"behave": "slow", "delay": 2, "timeout": 0.3})
    row = effect_row(database_url, key)
    assert (row["state"], row["error_class"]) == ("unknown", "timeout")
    assert "TimeoutError" in row["failure_reason"]


def test_not_performed_records_failed_and_the_same_key_runs_again(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    key, target = f"refund:NP-{unique}", f"invoice:NP-{unique}"
    with pytest.raises(NotPerformed):
        with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as e:
            e.dispatched()
            raise NotPerformed("the provider answered: no refund was made")
    row = effect_row(database_url, key)
    assert (row["state"], row["retryable"]) == ("failed", True)
    with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as again:
        assert again.begun is not None and again.begun.decision == "retry"
        again.dispatched()
        again.succeeded("re_np")
    assert effect_row(database_url, key)["state"] == "succeeded"


def test_an_exception_before_dispatch_leaves_the_key_retryable(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    key, target = f"refund:BD-{unique}", f"invoice:BD-{unique}"
    with pytest.raises(KeyError):
        with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}):
            raise KeyError("customer")
    row = effect_row(database_url, key)
    assert (row["state"], row["retryable"], row["dispatched_at"]) == ("failed", True, None)


def test_a_mismatch_never_reaches_the_provider(database_url: str, provider_url: str, unique: str) -> None:
    refund = refund_tool(Ledger(database_url, requested_by="agent-test"), provider_url)
    refund(f"ORD-{unique}", "AP-1", 1500, "EUR")
    with pytest.raises(Rejected) as rejected:
        refund(f"ORD-{unique}", "AP-1", 2500, "EUR")
    assert rejected.value.differences["params.amount_minor"] == (1500, 2500)
    assert rejected.value.differences["amount_minor"] == (1500, 2500)
    assert "new key" in str(rejected.value)
    assert provider_calls(provider_url, f"refund:ORD-{unique}:AP-1") == 1


def test_a_rate_limit_records_the_providers_delay(database_url: str, provider_url: str, unique: str) -> None:
    refund = refund_tool(Ledger(database_url, requested_by="agent-test"), provider_url, "429")
    with pytest.raises(Exception):
        refund(f"ORD-{unique}", "AP-1", 1500, "EUR")
    row = effect_row(database_url, f"refund:ORD-{unique}:AP-1")
    assert (row["state"], row["error_class"], row["retryable"]) == ("failed", "rate_limited", True)
    with pytest.raises(Wait) as wait:
        refund(f"ORD-{unique}", "AP-1", 1500, "EUR")
    assert 5 <= wait.value.retry_after <= 7
    assert "same arguments" in str(wait.value)


def test_a_template_must_name_an_argument(database_url: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    with pytest.raises(ValueError, match="names no argument"):

        @ledger.tool(action="refund", op_key="refund:constant", target="invoice:{order_id}")
        def refund(order_id: str) -> None:
            pass

    with pytest.raises(ValueError, match="tool_call_id"):

        @ledger.tool(action="refund", op_key="refund:{tool_call_id}", target="invoice:{order_id}")
        def refund_too(order_id: str) -> None:
            pass

    with pytest.raises(ValueError, match="amount_minor='amount'"):

        @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}", amount_minor="amount")
        def refund_amount(order_id: str, amount_minor: int) -> None:
            pass


async def test_the_asyncio_decorator_replays(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test")
    calls = 0

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    async def refund(order_id: str, amount_minor: int) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"id": f"re_{order_id}", "amount_minor": amount_minor}

    first = await refund(f"AS-{unique}", 700)
    assert await refund(f"AS-{unique}", 700) == first
    assert calls == 1
