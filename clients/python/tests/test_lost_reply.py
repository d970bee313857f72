"""A reply lost after the ledger carried the call out: the statement ran and
committed on the server, then the connection closed before its answer
came back. The client tries again on a new connection: it reads the
effect back, recognises by its attempt id what the first send did (sending
the call again where that does not show), and the call goes on: one
provider call, the effect succeeded, nothing flagged, the key not left in
flight. Another attempt is never taken for this one, and an error the
ledger answered is never sent again."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Awaitable, Callable, Mapping

import psycopg
import pytest

from agent import post_refund
from effectwatch import AsyncLedger, InFlight, Intent, Ledger, NotPerformed
from effectwatch._core import BEGIN_SQL, COMPLETE_SQL, DISPATCH_SQL, OWN_SQL, POOL_WAIT
from test_client import attempts_of, effect_row, provider_calls

STATEMENTS = {"begin": BEGIN_SQL, "dispatch": DISPATCH_SQL, "complete": COMPLETE_SQL}


def lost_reply() -> psycopg.OperationalError:
    return psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")


def losing(
    ledger: Ledger, statement: str, times: int = 1, *, then: Callable[[], None] | None = None
) -> Counter[str]:
    """From now on, the first `times` sends of `statement` on `ledger`'s
    connections are carried out and committed by the server, then the
    connection closes before the reply is read (after `then`, what others
    do meanwhile). Answers how many times each statement was sent."""
    sent: Counter[str] = Counter()
    run = ledger._run

    def run_losing(connection: psycopg.Connection[Any], sql: str, args: Mapping[str, Any]) -> dict[str, Any] | None:
        sent[sql] += 1
        row = run(connection, sql, args)
        if sql == statement and sent[sql] <= times:
            connection.close()
            if then is not None:
                then()
            raise lost_reply()
        return row

    setattr(ledger, "_run", run_losing)
    return sent


def carried_out_late(ledger: Ledger, statement: str) -> Counter[str]:
    """The first send of `statement` loses its connection before the server
    answers, and the server carries it out only after the client's next
    statement (the read before sending it again), as a statement held up
    in the network may."""
    sent: Counter[str] = Counter()
    held: list[tuple[str, Mapping[str, Any]]] = []
    run = ledger._run

    def run_late(connection: psycopg.Connection[Any], sql: str, args: Mapping[str, Any]) -> dict[str, Any] | None:
        sent[sql] += 1
        if sql == statement and sent[sql] == 1:
            held.append((sql, args))
            connection.close()
            raise lost_reply()
        row = run(connection, sql, args)
        while held:
            late_sql, late_args = held.pop()
            with psycopg.connect(str(ledger.conninfo), autocommit=True) as late:
                late.execute(late_sql, late_args)
        return row

    setattr(ledger, "_run", run_late)
    return sent


def losing_async(ledger: AsyncLedger, statement: str, times: int = 1) -> Counter[str]:
    """`losing` for the asyncio client."""
    sent: Counter[str] = Counter()
    run = ledger._run

    async def run_losing(
        connection: psycopg.AsyncConnection[Any], sql: str, args: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        sent[sql] += 1
        row = await run(connection, sql, args)
        if sql == statement and sent[sql] <= times:
            await connection.close()
            raise lost_reply()
        return row

    setattr(ledger, "_run", run_losing)
    return sent


def refund_tool(ledger: Ledger, provider_url: str, *, validated: bool = False) -> Callable[[str], dict[str, Any]]:
    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                 external_ref=lambda answer: str(answer["id"]),
                 validate=(lambda order_id: None) if validated else None)
    def refund(order_id: str) -> dict[str, Any]:
        return post_refund(provider_url, f"refund:{order_id}", {"amount_minor": 1500})

    return refund


def async_refund_tool(
    ledger: AsyncLedger, provider_url: str, *, validated: bool = False
) -> Callable[[str], Awaitable[dict[str, Any]]]:
    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}",
                 external_ref=lambda answer: str(answer["id"]),
                 validate=(lambda order_id: None) if validated else None)
    async def refund(order_id: str) -> dict[str, Any]:
        return post_refund(provider_url, f"refund:{order_id}", {"amount_minor": 1500})

    return refund


def assert_done_once(
    database_url: str, provider_url: str, key: str, *, unlooked: bool = True
) -> dict[str, Any]:
    """One provider call, the effect succeeded with its reference, no late
    result, nothing flagged, and (`unlooked`) nothing in the duplicates pane
    for an operator to look at."""
    assert provider_calls(provider_url, key) == 1
    row = effect_row(database_url, key)
    assert (row["state"], row["external_ref"], row["late_result_at"], row["attention"]) == (
        "succeeded", f"re_{key}", None, None,
    )
    assert [kind for kind, flagged in attempts_of(database_url, key) if flagged] == []
    if unlooked:
        with psycopg.connect(database_url, autocommit=True) as connection:
            looks = connection.execute(
                "select look_reasons from ledger.duplicate_attempts where op_key = %s and needs_look", (key,)
            ).fetchall()
        assert looks == [], "an operator is asked to look at a repeat the client recognised as its own"
    return row


# How many times the lost statement is sent, and the read that recognises
# what its first send did: a begin or a dispatch found carried out for this
# attempt is not sent again; a completion is, and the ledger answers the
# repeat as one (applied = false, late = false, nothing flagged). The tool
# with nothing to validate begins and claims in one statement ("begin": its
# first send committed means pending, dispatched, this attempt's: it goes
# on dispatched); with a `validate`, begin and dispatch are two ("dispatch"
# loses the second).
SENDS = {"begin": 1, "dispatch": 1, "complete": 2}


@pytest.mark.parametrize("lost", ["begin", "dispatch", "complete"])
def test_a_lost_reply_is_recognised_and_the_call_goes_on(
    database_url: str, provider_url: str, unique: str, lost: str
) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    sent = losing(ledger, STATEMENTS[lost])
    refund = refund_tool(ledger, provider_url, validated=lost == "dispatch")
    order = f"LR-{lost}-{unique}"
    first = refund(order)
    assert (sent[STATEMENTS[lost]], sent[OWN_SQL]) == (SENDS[lost], 1)
    # Begun and claimed in one round trip, but where a `validate` comes between.
    assert sent[DISPATCH_SQL] == (1 if lost == "dispatch" else 0)
    assert_done_once(database_url, provider_url, f"refund:{order}")
    # The key is settled, not left in flight: the same call replays.
    assert refund(order) == first
    assert provider_calls(provider_url, f"refund:{order}") == 1


@pytest.mark.parametrize("lost", ["begin", "dispatch", "complete"])
async def test_an_asyncio_lost_reply_is_recognised_and_the_call_goes_on(
    database_url: str, provider_url: str, unique: str, lost: str
) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test")
    sent = losing_async(ledger, STATEMENTS[lost])
    refund = async_refund_tool(ledger, provider_url, validated=lost == "dispatch")
    order = f"ALR-{lost}-{unique}"
    first = await refund(order)
    assert (sent[STATEMENTS[lost]], sent[OWN_SQL]) == (SENDS[lost], 1)
    assert sent[DISPATCH_SQL] == (1 if lost == "dispatch" else 0)
    assert_done_once(database_url, provider_url, f"refund:{order}")
    assert await refund(order) == first
    assert provider_calls(provider_url, f"refund:{order}") == 1


@pytest.mark.parametrize("lost", ["begin", "dispatch"])
def test_a_first_send_carried_out_after_the_client_looked_is_recognised(
    database_url: str, provider_url: str, unique: str, lost: str
) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    sent = carried_out_late(ledger, STATEMENTS[lost])
    refund = refund_tool(ledger, provider_url, validated=lost == "dispatch")
    order = f"LRL-{lost}-{unique}"
    refund(order)
    # Sent again, it is answered in flight (begin, which claimed too) or not
    # claimed (dispatch): the read after says the first send was this
    # attempt's.
    assert (sent[STATEMENTS[lost]], sent[OWN_SQL]) == (2, 2)
    assert_done_once(database_url, provider_url, f"refund:{order}", unlooked=False)


def test_a_lost_completion_is_not_sent_again_over_another_attempts_call(
    database_url: str, provider_url: str, unique: str
) -> None:
    """A failure recorded, its reply lost; meanwhile another attempt takes
    the key again and calls the provider. Sending the failure again would
    settle that call as failed."""
    key, target, params = f"refund:LRM-{unique}", f"invoice:LRM-{unique}", {"amount_minor": 1500}
    other = Ledger(database_url, requested_by="agent-test")
    other_id = f"other-{unique}"

    def another_attempt_goes_on() -> None:
        assert other.begin(Intent(key, "refund", target, params, request_id=other_id)).decision == "retry"
        assert other.mark_dispatched(key, target=target, request_id=other_id).claimed

    ledger = Ledger(database_url, requested_by="agent-test")
    sent = losing(ledger, COMPLETE_SQL, then=another_attempt_goes_on)
    with pytest.raises(NotPerformed):
        with ledger.effect(key, action="refund", target=target, params=params) as e:
            e.dispatched()
            raise NotPerformed("the provider answered: no refund was made")
    assert sent[COMPLETE_SQL] == 1
    row = effect_row(database_url, key)
    assert (row["state"], row["request_id"], row["dispatched_at"] is not None) == ("pending", other_id, True)
    answer = post_refund(provider_url, key, {"amount_minor": 1500})
    completed = other.complete(key, target=target, outcome="succeeded", external_ref=answer["id"], result=answer,
                               request_id=other_id)
    assert (completed.applied, completed.late) == (True, False)
    assert_done_once(database_url, provider_url, key, unlooked=False)


def test_the_callers_request_id_is_the_attempt_id(database_url: str, provider_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test")
    losing(ledger, BEGIN_SQL)
    key, request_id = f"refund:LRQ-{unique}", f"turn-7-{unique}"
    with ledger.effect(key, action="refund", target=f"invoice:LRQ-{unique}", params={"amount_minor": 1500},
                       request_id=request_id) as e:
        assert e.begun is not None and e.begun.decision == "proceed"
        e.dispatched()
        answer = post_refund(provider_url, key, {"amount_minor": 1500})
        e.succeeded(answer["id"], answer)
    assert assert_done_once(database_url, provider_url, key)["request_id"] == request_id


def test_a_lost_begin_is_only_its_own_attempts(database_url: str, provider_url: str, unique: str) -> None:
    """Recognition is by attempt id: another attempt of the same key, whose
    own begin reply is lost too, is still told the key is in flight."""
    key, target = f"refund:LRO-{unique}", f"invoice:LRO-{unique}"
    first = Ledger(database_url, requested_by="agent-test")
    losing(first, BEGIN_SQL)
    begun = first.begin(Intent(key, "refund", target, {"amount_minor": 1500}, request_id=f"first-{unique}"))
    assert begun.decision == "proceed", "the first attempt's own begin, its reply lost, goes on"

    second = Ledger(database_url, requested_by="agent-test")
    sent = losing(second, BEGIN_SQL)
    ran = False
    with pytest.raises(InFlight):
        with second.effect(key, action="refund", target=target, params={"amount_minor": 1500}):
            ran = True
    assert not ran and sent[BEGIN_SQL] == 2
    assert provider_calls(provider_url, key) == 0
    row = effect_row(database_url, key)
    assert (row["state"], row["dispatched_at"], row["request_id"]) == ("pending", None, f"first-{unique}")


def test_an_error_the_ledger_answered_is_not_sent_again(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test", statement_timeout_ms=300)
    sent = losing(ledger, "no statement is lost")
    # A refusal: a key the ledger keeps for itself.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        with ledger.effect(f"compensate:LRE-{unique}", action="refund", target=f"invoice:LRE-{unique}",
                           params={"amount_minor": 1}):
            pass
    assert sent[BEGIN_SQL] == 1
    # A statement the server cancelled (an OperationalError, with its
    # SQLSTATE): here a begin kept waiting on the effect's row past the
    # statement timeout.
    key, target = f"refund:LRT-{unique}", f"invoice:LRT-{unique}"
    assert ledger.begin(Intent(key, "refund", target, {"amount_minor": 1})).decision == "proceed"
    with psycopg.connect(database_url) as holder:
        holder.execute("select 1 from ledger.effects where op_key = %s for update", (key,))
        with pytest.raises(psycopg.errors.QueryCanceled):
            with ledger.effect(key, action="refund", target=target, params={"amount_minor": 1}):
                pass
    assert sent[BEGIN_SQL] == 3


def test_a_ledger_out_of_reach_is_tried_a_few_times_then_said(database_url: str, unique: str) -> None:
    ledger = Ledger("postgresql://nobody@127.0.0.1:1/none", requested_by="agent-test")
    connections = 0
    connection = ledger._connection

    def counted(*, fresh: bool = False) -> Any:
        nonlocal connections
        connections += 1
        return connection(fresh=fresh)

    setattr(ledger, "_connection", counted)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        with ledger.effect(f"refund:LRU-{unique}", action="refund", target=f"invoice:LRU-{unique}", params={}):
            pass
    took = time.monotonic() - started
    # One try, which waits for its pool (which cannot connect) as long as
    # _core.POOL_WAIT says, and three more on connections of their own,
    # each of which reads the effect back first (whether the lost send went
    # through) and so fails there, about two seconds in all.
    assert connections == 4
    assert POOL_WAIT + 1.5 < took < POOL_WAIT + 10, took