"""The client's promises against a real ledger and a real provider process:
what reaches the provider, and what the ledger records, for each way a call
can end."""

from __future__ import annotations

import json
import urllib.request
from typing import Any, Iterator, cast

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from agent import post_refund, refund_tool
from effectwatch import (
    AsyncLedger,
    BadArgument,
    InFlight,
    Intent,
    Ledger,
    Misuse,
    NotPerformed,
    NotYours,
    Rejected,
    Wait,
)


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


def effects_on(database_url: str, target: str) -> list[dict[str, Any]]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as connection:
        return connection.execute("select * from ledger.effects where target = %s", (target,)).fetchall()


def attempts_of(database_url: str, op_key: str) -> list[tuple[str, bool]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        rows = connection.execute(
            "select kind, flagged from ledger.attempts where op_key = %s order by at, id", (op_key,)
        ).fetchall()
    return [(kind, flagged) for kind, flagged in rows]


def test_one_refund_written_three_ways_is_one_effect(database_url: str, provider_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")

    # The provider counts calls per order, whatever spelling the amount had.
    @ledger.tool(action="refund", op_key="refund:{order_id}:{amount_minor}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency", external_ref=lambda answer: str(answer["id"]))
    def refund(order_id: str, amount_minor: int | float | str, currency: str) -> dict[str, Any]:
        return post_refund(provider_url, f"order:{order_id}", {"amount_minor": amount_minor, "currency": currency})

    order = f"K3-{unique}"
    first = refund(order, 1500, "EUR")
    assert refund(order, 1500.0, "EUR") == first
    assert refund(order, "01500", "EUR") == first
    assert provider_calls(provider_url, f"order:{order}") == 1
    [row] = effects_on(database_url, f"invoice:{order}")
    assert (row["op_key"], row["state"], row["amount_minor"]) == (f"refund:{order}:1500", "succeeded", 1500)
    assert json.dumps(row["params"], sort_keys=True) == json.dumps(
        {"order_id": order, "amount_minor": 1500, "currency": "EUR"}, sort_keys=True
    )
    assert [kind for kind, _ in attempts_of(database_url, row["op_key"])] == ["dispatch", "replay", "replay"]


def test_a_structure_in_another_key_order_is_one_effect(database_url: str, provider_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")

    @ledger.tool(action="ship", op_key="ship:{order_id}:{address}", target="order:{order_id}")
    def ship(order_id: str, address: dict[str, Any]) -> dict[str, Any]:
        return post_refund(provider_url, f"ship:{order_id}", {"address": address})

    order = f"SH-{unique}"
    first = ship(order, {"zip": "75001", "city": "Paris", "lines": [{"qty": 2, "sku": "A"}]})
    again = ship(order, {"city": "Paris", "lines": [{"sku": "A", "qty": 2.0}], "zip": "75001"})
    assert again == first
    assert provider_calls(provider_url, f"ship:{order}") == 1
    assert len(effects_on(database_url, f"order:{order}")) == 1


def test_money_that_is_not_whole_is_refused_before_the_ledger(
    database_url: str, provider_url: str, unique: str
) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")

    @ledger.tool(action="refund", op_key="refund:{order_id}:{amount_minor}", target="invoice:{order_id}",
                 amount_minor="amount_minor", currency="currency")
    def refund(order_id: str, amount_minor: int | float, currency: str) -> dict[str, Any]:
        return post_refund(provider_url, f"order:{order_id}", {"amount_minor": amount_minor, "currency": currency})

    order = f"HALF-{unique}"
    with pytest.raises(BadArgument) as refused:
        refund(order, 1500.5, "EUR")
    assert refused.value.argument == "amount_minor"
    assert "whole number of minor units" in str(refused.value) and "1500.5" in str(refused.value)
    assert effects_on(database_url, f"invoice:{order}") == []
    assert provider_calls(provider_url, f"order:{order}") == 0


def test_normalisers_and_arguments_are_checked_when_the_tool_is_declared(database_url: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    with pytest.raises(ValueError, match="'title'"):

        @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                     normalise={"order_id": ["trim", "title"]})
        def refund(order_id: str) -> None:
            pass

    with pytest.raises(ValueError, match="normalise names order"):

        @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                     normalise={"order": ["trim"]})
        def refund_too(order_id: str) -> None:
            pass


def test_intent_of_is_the_canonical_intent(database_url: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")

    @ledger.tool(action="refund", op_key="refund:{order.id}:{amount_minor}", target="invoice:{order.id}",
                 normalise={"currency": ["trim", "upper"]}, amount_minor="amount_minor", currency="currency")
    def refund(order: dict[str, Any], amount_minor: int | str, currency: str, note: str = "") -> None:
        pass

    intent = ledger.intent_of(refund, order={"id": "INV-9", "lines": 2.0}, amount_minor=" +1500", currency=" eur")
    assert (intent.op_key, intent.target, intent.amount_minor, intent.currency) == (
        "refund:INV-9:1500", "invoice:INV-9", 1500, "EUR",
    )
    assert json.dumps(intent.params, sort_keys=True) == json.dumps(
        {"order": {"id": "INV-9", "lines": 2}, "amount_minor": 1500, "currency": "EUR", "note": ""}, sort_keys=True
    )


def test_the_primitive_sends_params_by_value(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    key, target = f"refund:PV-{unique}", f"invoice:PV-{unique}"
    # As a language model's tool call gives them, whatever the annotations say.
    whole, half = cast(int, 100.0), cast(int, 100.5)
    effect = ledger.effect(key, action="refund", target=target, params={"amount_minor": 100.0, "lines": [{"qty": 2.0}]},
                           amount_minor=whole, currency="EUR")
    assert json.dumps(effect.intent.params) == '{"amount_minor": 100, "lines": [{"qty": 2}]}'
    assert effect.intent.amount_minor == 100 and type(effect.intent.amount_minor) is int
    with pytest.raises(BadArgument, match="amount_minor"):
        ledger.effect(key, action="refund", target=target, params={}, amount_minor=half, currency="EUR")


def settled_effect(ledger: Ledger, key: str, target: str) -> None:
    with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as e:
        e.dispatched()
        e.succeeded("re_1", {"ok": True})


def test_a_replay_through_with_records_nothing(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    key, target = f"refund:RW-{unique}", f"invoice:RW-{unique}"
    settled_effect(ledger, key, target)

    # Each way a replayed block can end: normally without dispatched(), at
    # dispatched(), and on an exception of its own.
    with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as again:
        assert again.replayed
    with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as again:
        again.dispatched()
    with pytest.raises(KeyError):
        with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}):
            raise KeyError("customer")

    row = effect_row(database_url, key)
    assert (row["state"], row["external_ref"], row["late_result_at"]) == ("succeeded", "re_1", None)
    assert attempts_of(database_url, key) == [("dispatch", False)] + [("replay", False)] * 3


def test_succeeded_on_a_replay_is_said_and_records_nothing(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    key, target = f"refund:RS-{unique}", f"invoice:RS-{unique}"
    settled_effect(ledger, key, target)
    with pytest.raises(Misuse, match="replayed"):
        with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as again:
            again.succeeded("re_again", {"ok": False})
    row = effect_row(database_url, key)
    assert (row["state"], row["external_ref"], row["late_result_at"]) == ("succeeded", "re_1", None)
    assert attempts_of(database_url, key) == [("dispatch", False), ("replay", False)]


async def test_an_asyncio_replay_through_with_records_nothing(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test")
    key, target = f"refund:ARW-{unique}", f"invoice:ARW-{unique}"
    params = {"amount_minor": 100}
    async with ledger.effect(key, action="refund", target=target, params=params) as e:
        await e.dispatched()
        await e.succeeded("re_arw", {"ok": True})
    async with ledger.effect(key, action="refund", target=target, params=params) as again:
        assert again.replayed
    async with ledger.effect(key, action="refund", target=target, params=params) as again:
        await again.dispatched()
    with pytest.raises(KeyError):
        async with ledger.effect(key, action="refund", target=target, params=params):
            raise KeyError("customer")

    row = effect_row(database_url, key)
    assert (row["state"], row["external_ref"], row["late_result_at"]) == ("succeeded", "re_arw", None)
    assert attempts_of(database_url, key) == [("dispatch", False)] + [("replay", False)] * 3
    with pytest.raises(Misuse, match="replayed"):
        async with ledger.effect(key, action="refund", target=target, params=params) as again:
            await again.succeeded("re_again", {"ok": False})
    assert effect_row(database_url, key)["late_result_at"] is None


def test_dispatched_twice_is_said_and_claims_once(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    key, target = f"refund:DT-{unique}", f"invoice:DT-{unique}"
    with pytest.raises(Misuse, match="twice"):
        with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as e:
            e.dispatched()
            e.dispatched()
    assert attempts_of(database_url, key) == [("dispatch", False)]
    # The provider may have been reached between the two calls.
    assert effect_row(database_url, key)["state"] == "unknown"


def test_succeeded_without_dispatched_is_recorded_unknown(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    key, target = f"refund:SU-{unique}", f"invoice:SU-{unique}"
    with pytest.raises(Misuse, match="without dispatched"):
        with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as e:
            e.succeeded("re_su", {"ok": True})
    row = effect_row(database_url, key)
    assert (row["state"], row["retryable"], row["in_unknown_pane"]) == ("unknown", None, True)
    assert "without dispatched()" in row["failure_reason"]
    # Not retryable: the next call is told the effect is in flight, and
    # does not reach the provider a second time.
    with pytest.raises(InFlight):
        with ledger.effect(key, action="refund", target=target, params={"amount_minor": 100}) as again:
            again.dispatched()


async def test_asyncio_misuse_is_said(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test")
    twice, unclaimed = f"refund:ADT-{unique}", f"refund:ASU-{unique}"
    with pytest.raises(Misuse, match="twice"):
        async with ledger.effect(twice, action="refund", target=f"invoice:{twice}", params={}) as e:
            await e.dispatched()
            await e.dispatched()
    with pytest.raises(Misuse, match="without dispatched"):
        async with ledger.effect(unclaimed, action="refund", target=f"invoice:{unclaimed}", params={}) as e:
            await e.succeeded("re_asu")
    assert attempts_of(database_url, twice) == [("dispatch", False)]
    assert (effect_row(database_url, twice)["state"], effect_row(database_url, unclaimed)["state"]) == (
        "unknown", "unknown",
    )


async def test_the_asyncio_decorator_makes_keys_from_values(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test")
    received: list[tuple[str, Any]] = []

    @ledger.tool(action="refund", op_key="refund:{order_id}:{amount_minor}", target="invoice:{order_id}",
                 normalise={"order_id": ["trim", "upper"]}, amount_minor="amount_minor", currency="currency")
    async def refund(order_id: str, amount_minor: int | float | str, currency: str) -> dict[str, Any]:
        received.append((order_id, amount_minor))
        return {"id": f"re_{order_id}"}

    order = f"AK-{unique}".upper()
    first = await refund(f" {order.lower()} ", "+1500", "EUR")
    assert await refund(order, 1500, "EUR") == first
    # The function is called as the tool declared its arguments, so a
    # provider key it builds from them is the ledger's.
    assert received == [(order, 1500)]
    assert ledger.intent_of(refund, order_id=order.lower(), amount_minor=1500.0, currency="EUR").op_key == (
        f"refund:{order}:1500"
    )
    with pytest.raises(BadArgument, match="amount_minor"):
        await refund(order, "15.00", "EUR")
    assert len(received) == 1


@pytest.fixture
def two_logins(database_url: str, unique: str) -> Iterator[tuple[str, str]]:
    """Two agent logins of their own (an owner and a stranger), dropped at
    the end; skipped where the server lets no password-less login in."""
    names = [f"ew_py_{unique}_owner", f"ew_py_{unique}_stranger"]
    with psycopg.connect(database_url, autocommit=True) as admin:
        for name in names:
            admin.execute(sql.SQL("create role {} login in role effect_agent").format(sql.Identifier(name)))
    try:
        urls = [make_conninfo(database_url, user=name) for name in names]
        try:
            psycopg.connect(urls[0]).close()
        except psycopg.OperationalError as error:
            pytest.skip(f"the server does not let a password-less login in: {error}")
        yield urls[0], urls[1]
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            for name in names:
                admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(name)))


def test_another_logins_key_is_refused_and_tells_nothing(two_logins: tuple[str, str], unique: str) -> None:
    owner_url, stranger_url = two_logins
    key, target = f"refund:NY-{unique}", f"invoice:NY-{unique}"
    params = {"amount_minor": 1500, "currency": "EUR"}
    owner = Ledger(owner_url, requested_by="agent-a")
    with owner.effect(key, action="refund", target=target, params=params) as e:
        e.dispatched()
        e.succeeded("re_ny", {"card": "4242"})
    stranger = Ledger(stranger_url, requested_by="agent-b")
    ran = False
    with pytest.raises(NotYours) as refused:
        with stranger.effect(key, action="refund", target=target, params=params):
            ran = True
    assert not ran
    assert (refused.value.decision, refused.value.state) == ("refused", "")
    said = str(refused.value)
    assert "another caller" in said and "Do not retry" in said and "4242" not in said
    begun = stranger.begin(Intent(key, "refund", target, params))
    assert (begun.decision, begun.effect_id, begun.state, begun.result) == ("refused", None, None, None)
    # The owner's repeat is still its replay.
    with owner.effect(key, action="refund", target=target, params=params) as again:
        again.dispatched()
    assert again.replayed and again.result == {"card": "4242"}
    # Their pools' connections closed, so that the logins can be dropped.
    owner.close()
    stranger.close()
