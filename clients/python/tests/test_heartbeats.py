"""Heartbeats (README, "Heartbeats"): a provider call's claim starts its
lease in the same statement, and while the call runs the client beats for
it off the caller's path, a third of a lease after the claim and every
third of a lease from then, so that a worker killed mid-call is unknown
(worker_lost) within its lease, a slow call that beats is never taken for a
dead one, a call that answers sooner sends no beat at all, and nothing a
beat meets reaches the call."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import psycopg
import pytest
from psycopg.rows import dict_row

from effectwatch import AsyncLedger, Intent, Ledger
from effectwatch._core import BEGIN_SQL, HEARTBEAT_SQL
from test_lost_reply import losing, lost_reply

HERE = Path(__file__).parent
LEASE = 1.0


def one_row(database_url: str, query: str, *args: Any) -> dict[str, Any] | None:
    # Never prepared: these reads go through PgBouncer too (test_pgbouncer.py).
    with psycopg.connect(database_url, autocommit=True, prepare_threshold=None, row_factory=dict_row) as connection:
        return connection.execute(query, args).fetchone()


def beats_of(database_url: str, op_key: str) -> int | None:
    """How many beats the effect's lease has had (None: it has none)."""
    row = one_row(
        database_url,
        "select w.beats from ledger.worker_leases w join ledger.effects e on e.id = w.effect_id where e.op_key = %s",
        op_key,
    )
    return None if row is None else int(row["beats"])


def shown(database_url: str, op_key: str) -> tuple[str, str | None]:
    """The effect's state and error class in every view of now."""
    row = one_row(database_url, "select state, error_class from ledger.effects_at(null) where op_key = %s", op_key)
    assert row is not None, f"no effect {op_key}"
    return row["state"], row["error_class"]


def history_of(database_url: str, op_key: str) -> list[str]:
    with psycopg.connect(database_url, autocommit=True, prepare_threshold=None) as connection:
        rows = connection.execute(
            "select h.state from ledger.effect_history h join ledger.effects e on e.id = h.effect_id"
            " where e.op_key = %s order by h.version",
            (op_key,),
        ).fetchall()
    return [state for state, in rows]


def until(check: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(0.02)


async def until_async(check: Callable[[], bool], within: float, what: str) -> None:
    """`until` that leaves the event loop, and the beats on it, running."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        await asyncio.sleep(0.02)


def warnings_of(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [
        record.getMessage() for record in caplog.records
        if record.name == "effectwatch" and record.levelno == logging.WARNING and words in record.getMessage()
    ]


def called(query: Any) -> str:
    """The ledger function a statement calls (else the statement)."""
    found = re.search(r"ledger\.(\w+)\(", str(query))
    return found.group(1) if found else str(query)


class Seam:
    """What reaches the ledger from one ledger's connections: the ledger
    function each statement calls, in order, and the lease each beat asks
    for (`leases`, seconds). While `unreachable` is set, or
    for the first `lose_beats` beats, a beat loses its connection before
    reaching the ledger, as with the database out of reach or a pooler's
    restart; other statements go through."""

    def __init__(self, lose_beats: int = 0) -> None:
        self.sent: list[str] = []
        self.leases: list[float] = []
        self.unreachable = threading.Event()
        self.lose_beats = lose_beats

    def beats_sent(self) -> int:
        return self.sent.count("heartbeat")

    def lost(self, query: Any, params: Any = None) -> bool:
        self.sent.append(called(query))
        if query != HEARTBEAT_SQL:
            return False
        self.leases.append(float(params["lease"]))
        if self.lose_beats > 0:
            self.lose_beats -= 1
            return True
        return self.unreachable.is_set()

    def install(self, ledger: Ledger) -> Seam:
        run = ledger._run

        def run_through(connection: psycopg.Connection[Any], sql: str, args: Mapping[str, Any]) -> dict[str, Any] | None:
            if self.lost(sql, args):
                connection.close()
                raise lost_reply()
            return run(connection, sql, args)

        setattr(ledger, "_run", run_through)
        return self

    def install_async(self, ledger: AsyncLedger) -> Seam:
        run = ledger._run

        async def run_through(
            connection: psycopg.AsyncConnection[Any], sql: str, args: Mapping[str, Any]
        ) -> dict[str, Any] | None:
            if self.lost(sql, args):
                await connection.close()
                raise lost_reply()
            return await run(connection, sql, args)

        setattr(ledger, "_run", run_through)
        return self


def intent_for(key: str) -> Intent:
    return Intent(key, "refund", f"invoice:{key}", {"amount_minor": 300})


def test_a_worker_killed_mid_call_is_unknown_within_its_lease(database_url: str, unique: str) -> None:
    order = f"HBK-{unique}"
    key = f"refund:{order}"
    with subprocess.Popen(
        [sys.executable, str(HERE / "heartbeat_worker.py"), database_url, order, str(LEASE)],
        stdout=subprocess.PIPE, text=True,
    ) as worker:
        try:
            # Killed as soon as its provider call starts: the claim started
            # the lease, no beat need have been sent.
            assert worker.stdout is not None and worker.stdout.readline().strip() == "started"
            worker.send_signal(signal.SIGKILL)
            killed = time.monotonic()
        finally:
            worker.kill()
    assert beats_of(database_url, key) is not None, "the claim started no lease"
    found = None
    while found is None and time.monotonic() - killed < LEASE + 5:
        found = one_row(database_url, "select last_error from ledger.unknown_outcomes_at(null) where op_key = %s", key)
        if found is None:
            time.sleep(0.02)
    took = time.monotonic() - killed
    print(f"heartbeats: a worker SIGKILLed as its provider call started was unknown {took:.2f} s later "
          f"(lease {LEASE:g} s)")
    assert found is not None, f"{key} was not unknown {took:.1f} s after its worker was killed"
    assert str(found["last_error"]).startswith("worker_lost"), found
    assert took < LEASE + 2


# A slow call's lease: its claim's beat, then one every third of a lease.
SLOW = 3.3 * LEASE
# Never fewer than the claim's and one in each lease after it, without
# which the lease would run out (nine beats come in 3.3 leases, on time).
FEWEST_BEATS = 4


def slow_call_checks(database_url: str, key: str, seen: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    assert seen["beats"] is not None and seen["beats"] >= FEWEST_BEATS, f"{seen['beats']} beats in {SLOW:g} s"
    assert seen["during"] == ("pending", None)
    history = history_of(database_url, key)
    assert history[-1] == "succeeded" and "unknown" not in history, history
    # Beats stopped before the completion: none was told the call is over.
    assert warnings_of(caplog, "") == []
    print(f"heartbeats: a call of {SLOW:g} s with a lease of {LEASE:g} s had {seen['beats']} beats, the claim's first")


def test_a_slow_call_that_beats_is_never_unknown(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = Ledger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    seen: dict[str, Any] = {}

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    def refund(order_id: str) -> dict[str, str]:
        time.sleep(SLOW)
        seen["beats"] = beats_of(database_url, f"refund:{order_id}")
        seen["during"] = shown(database_url, f"refund:{order_id}")
        return {"id": f"re_{order_id}"}

    order = f"HBS-{unique}"
    refund(order)
    slow_call_checks(database_url, f"refund:{order}", seen, caplog)


async def test_a_slow_asyncio_call_that_beats_is_never_unknown(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = AsyncLedger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    seen: dict[str, Any] = {}

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    async def refund(order_id: str) -> dict[str, str]:
        await asyncio.sleep(SLOW)
        seen["beats"] = beats_of(database_url, f"refund:{order_id}")
        seen["during"] = shown(database_url, f"refund:{order_id}")
        return {"id": f"re_{order_id}"}

    order = f"HBA-{unique}"
    await refund(order)
    slow_call_checks(database_url, f"refund:{order}", seen, caplog)


# What a quick call sends: decorated, its begin claims the effect (and
# starts the lease); under `effect`, dispatched() does. Then its answer.
QUICK_TOOL = ["begin_and_dispatch", "complete_effect"]
QUICK_EFFECT = ["begin_and_dispatch", "mark_dispatched", "complete_effect"]


def quick_call_checks(database_url: str, keys: list[str], seam: Seam, beats: list[int | None]) -> None:
    assert beats == [1, 1], f"the lease each claim started, never beaten: {beats}"
    assert seam.sent == QUICK_TOOL + QUICK_EFFECT, seam.sent
    for key in keys:
        assert history_of(database_url, key)[-1] == "succeeded"
        assert beats_of(database_url, key) is None, "a settled effect's lease is dropped"


def test_a_call_that_answers_at_once_sends_no_beat(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    seam = Seam().install(ledger)
    beats: list[int | None] = []

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    def refund(order_id: str) -> dict[str, str]:
        beats.append(beats_of(database_url, f"refund:{order_id}"))
        return {"id": f"re_{order_id}"}

    order = f"HBQ-{unique}"
    refund(order)
    key = f"refund:HBQE-{unique}"
    with ledger.effect(key, action="refund", target=f"invoice:{key}", params={"amount_minor": 300}) as e:
        e.dispatched()
        beats.append(beats_of(database_url, key))
        e.succeeded("re_quick")
    # Past the time a first beat would have been due: none comes late.
    time.sleep(LEASE)
    quick_call_checks(database_url, [f"refund:{order}", key], seam, beats)


async def test_an_asyncio_call_that_answers_at_once_sends_no_beat(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    seam = Seam().install_async(ledger)
    beats: list[int | None] = []

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    async def refund(order_id: str) -> dict[str, str]:
        beats.append(beats_of(database_url, f"refund:{order_id}"))
        return {"id": f"re_{order_id}"}

    order = f"HBQA-{unique}"
    await refund(order)
    key = f"refund:HBQAE-{unique}"
    async with ledger.effect(key, action="refund", target=f"invoice:{key}", params={"amount_minor": 300}) as e:
        await e.dispatched()
        beats.append(beats_of(database_url, key))
        await e.succeeded("re_quick")
    await asyncio.sleep(LEASE)
    quick_call_checks(database_url, [f"refund:{order}", key], seam, beats)


def test_no_heartbeats_hold_no_lease(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test", heartbeat_lease=None)
    seam = Seam().install(ledger)
    key = f"refund:HBN-{unique}"
    with ledger.effect(key, action="refund", target=f"invoice:{key}", params={"amount_minor": 100}) as e:
        e.dispatched()
        # Past the first beat's time and past a lease, were there one.
        time.sleep(LEASE + 0.3)
        during = beats_of(database_url, key)
        e.succeeded("re_hbn")
    # Nor does a claim start a lease.
    assert during is None
    assert seam.beats_sent() == 0
    assert ledger.beat_for(key) is None
    assert shown(database_url, key) == ("succeeded", None)


async def test_no_asyncio_heartbeats_hold_no_lease(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test", heartbeat_lease=None)
    seam = Seam().install_async(ledger)
    during: list[int | None] = []

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    async def refund(order_id: str) -> dict[str, str]:
        await asyncio.sleep(LEASE + 0.3)
        during.append(beats_of(database_url, f"refund:{order_id}"))
        return {"id": f"re_{order_id}"}

    order = f"HBNA-{unique}"
    await refund(order)
    assert during == [None]
    assert seam.beats_sent() == 0
    assert shown(database_url, f"refund:{order}") == ("succeeded", None)


def test_a_claim_made_directly_starts_a_lease_only_when_asked(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    seam = Seam().install(ledger)
    plain, plain_later = intent_for(f"refund:HBP-{unique}"), intent_for(f"refund:HBPL-{unique}")
    leased, leased_later = intent_for(f"refund:HBD-{unique}"), intent_for(f"refund:HBDL-{unique}")
    assert ledger.begin(plain, dispatch=True).dispatched
    assert ledger.begin(plain_later).decision == "proceed"
    assert ledger.mark_dispatched(plain_later.op_key, target=plain_later.target).claimed
    assert ledger.begin(leased, dispatch=True, lease=True).dispatched
    assert ledger.begin(leased_later).decision == "proceed"
    assert ledger.mark_dispatched(leased_later.op_key, target=leased_later.target, lease=True).claimed
    # The plain claims keep the window's rule; the leased ones beat or are lost.
    assert [beats_of(database_url, i.op_key) for i in (plain, plain_later, leased, leased_later)] == [None, None, 1, 1]
    for intent in (plain, plain_later, leased, leased_later):
        assert ledger.complete(intent.op_key, target=intent.target, outcome="succeeded", external_ref="re_1").applied
        assert beats_of(database_url, intent.op_key) is None
    assert seam.beats_sent() == 0


async def test_an_asyncio_claim_made_directly_starts_a_lease_only_when_asked(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    plain, leased = intent_for(f"refund:HBPA-{unique}"), intent_for(f"refund:HBDA-{unique}")
    assert (await ledger.begin(plain, dispatch=True)).dispatched
    assert (await ledger.begin(leased)).decision == "proceed"
    assert (await ledger.mark_dispatched(leased.op_key, target=leased.target, lease=True)).claimed
    assert [beats_of(database_url, i.op_key) for i in (plain, leased)] == [None, 1]
    for intent in (plain, leased):
        await ledger.complete(intent.op_key, target=intent.target, outcome="succeeded", external_ref="re_1")


def test_a_lost_beat_is_said_and_the_next_tick_keeps_the_lease(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = Ledger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    # The first beat loses its connection, as in a PgBouncer restart. (Two
    # in a row would leave the third to land as the claim's lease ends.)
    seam = Seam(lose_beats=1).install(ledger)
    key = f"refund:HBF-{unique}"
    with ledger.effect(key, action="refund", target=f"invoice:{key}", params={"amount_minor": 100}) as e:
        e.dispatched()
        time.sleep(1.2 * LEASE)
        beats = beats_of(database_url, key)
        e.succeeded("re_hbf")
    [failed] = warnings_of(caplog, "")
    assert f"a heartbeat for {key} failed (OperationalError" in failed, failed
    # The claim's lease, moved by the beats after the lost one (two thirds
    # and a whole lease in); the lost one was sent, never counted.
    assert beats is not None and beats >= 2, f"beats: {beats}"
    assert seam.beats_sent() >= beats, seam.sent
    history = history_of(database_url, key)
    assert history[-1] == "succeeded" and "unknown" not in history, history


def lost_call_checks(database_url: str, key: str, caplog: pytest.LogCaptureFixture) -> None:
    failed = warnings_of(caplog, "a heartbeat for")
    assert failed and all(key in said and "OperationalError" in said for said in failed), failed
    [lost] = warnings_of(caplog, "declared this call lost")
    assert key in lost and "its answer will still be recorded" in lost
    # Written lost by the first beat that got through, then settled by the
    # call's own answer.
    assert history_of(database_url, key)[-2:] == ["unknown", "succeeded"]
    row = one_row(database_url, "select state, external_ref from ledger.effects where op_key = %s", key)
    assert row == {"state": "succeeded", "external_ref": f"re_{key}"}


def test_a_call_the_ledger_declared_lost_still_records_its_answer(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = Ledger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    seam = Seam().install(ledger)
    key = f"refund:HBL-{unique}"
    with ledger.effect(key, action="refund", target=f"invoice:{key}", params={"amount_minor": 100}) as e:
        # Out of reach from the claim on: the lease the claim started runs
        # out, every beat meanwhile lost.
        seam.unreachable.set()
        e.dispatched()
        until(lambda: shown(database_url, key) == ("unknown", "worker_lost"), LEASE + 5, "the lease running out")
        seam.unreachable.clear()
        until(lambda: bool(warnings_of(caplog, "declared this call lost")), LEASE + 5, "the next beat")
        e.succeeded(f"re_{key}", {"late": True})
    lost_call_checks(database_url, key, caplog)


async def test_an_asyncio_call_the_ledger_declared_lost_still_records_its_answer(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = AsyncLedger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    seam = Seam().install_async(ledger)
    key = f"refund:HBLA-{unique}"
    async with ledger.effect(key, action="refund", target=f"invoice:{key}", params={"amount_minor": 100}) as e:
        seam.unreachable.set()
        await e.dispatched()
        await until_async(
            lambda: shown(database_url, key) == ("unknown", "worker_lost"), LEASE + 5, "the lease running out"
        )
        seam.unreachable.clear()
        await until_async(lambda: bool(warnings_of(caplog, "declared this call lost")), LEASE + 5, "the next beat")
        await e.succeeded(f"re_{key}", {"late": True})
    lost_call_checks(database_url, key, caplog)


def test_a_beat_that_finds_its_call_completed_stops_and_says_nothing(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = Ledger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    seam = Seam().install(ledger)
    intent = intent_for(f"refund:HBC-{unique}")
    # Beats started for a call that is completed before the first is due,
    # by a caller that did not stop them (an operator's settlement says the
    # same to a beat).
    assert ledger.begin(intent, dispatch=True, lease=True).dispatched
    beats = ledger.beat_for(intent.op_key)
    assert beats is not None
    assert ledger.complete(intent.op_key, target=intent.target, outcome="succeeded", external_ref="re_c").applied
    until(lambda: seam.beats_sent() > 0, 5, "the first beat")
    # Three ticks more: the first beat was told the call is over, and was the last.
    time.sleep(LEASE)
    beats.stop()
    assert seam.beats_sent() == 1, seam.sent
    assert warnings_of(caplog, "") == []
    assert history_of(database_url, intent.op_key)[-1] == "succeeded"


async def test_an_asyncio_beat_that_finds_its_call_completed_stops_and_says_nothing(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = AsyncLedger(database_url, requested_by="agent-test", heartbeat_lease=LEASE)
    seam = Seam().install_async(ledger)
    intent = intent_for(f"refund:HBCA-{unique}")
    assert (await ledger.begin(intent, dispatch=True, lease=True)).dispatched
    beats = ledger.beat_for(intent.op_key)
    assert beats is not None
    assert (await ledger.complete(intent.op_key, target=intent.target, outcome="succeeded", external_ref="re_c")).applied
    await until_async(lambda: seam.beats_sent() > 0, 5, "the first beat")
    await asyncio.sleep(LEASE)
    await beats.stop()
    assert seam.beats_sent() == 1, seam.sent
    assert warnings_of(caplog, "") == []


@pytest.mark.parametrize("face", [Ledger, AsyncLedger])
def test_a_lease_is_from_a_second_to_an_hour(face: Callable[..., Any]) -> None:
    nowhere = "postgresql://127.0.0.1/none"  # made, never connected to
    for bound in (1.0, 3600.0):
        assert face(nowhere, requested_by="agent-test", heartbeat_lease=bound).heartbeat_lease == bound
    for outside in (0.5, 0.0, -15.0, 3600.5, float("nan")):
        with pytest.raises(ValueError, match="heartbeat_lease") as refused:
            face(nowhere, requested_by="agent-test", heartbeat_lease=outside)
        assert "\n" not in str(refused.value)


def test_both_faces_take_the_same_settings() -> None:
    # Names, kinds and defaults; the pool each takes is its face's own
    # (tests/test_faces.py compares the whole surface).
    def settings(face: type) -> list[tuple[str, Any, Any]]:
        return [(setting.name, setting.kind, setting.default) for setting in inspect.signature(face).parameters.values()]

    assert settings(Ledger) == settings(AsyncLedger)
    assert inspect.signature(Ledger).parameters["heartbeat_lease"].default == 15.0


# An action's policy may set the lease (ledger.op_set_policy(heartbeat_lease
# => ...)): a worker that asked for its own is held to the policy's, and the
# client beats by the lease the ledger answers, not by its own. The action is
# one of these tests' own, so that the suite's other refunds keep theirs.
POLICY_ACTION = "refund_policy_lease"
POLICY_LEASE = 1.0
# A call of three and a half of the policy's leases, with the client left at
# its default 15 s: by its own lease it would send no beat, and be lost.
POLICY_SLOW = 3.5
# The claim's, then one every third of the policy's lease (ten in 3.5 s),
# and never fewer than one in each lease after the claim's.
POLICY_FEWEST_BEATS = 5


def held_to_the_policy(database_url: str, action: str = POLICY_ACTION, lease: float = POLICY_LEASE) -> None:
    one_row(
        database_url,
        "select * from ledger.op_set_policy(action => %s, operator => 'test', reason => 'test',"
        " heartbeat_lease => make_interval(secs => %s::float8))",
        action, lease,
    )


def policy_call_checks(
    database_url: str, key: str, seen: dict[str, Any], seam: Seam, caplog: pytest.LogCaptureFixture
) -> None:
    assert seen["states"] == {("pending", None)}, seen["states"]
    assert seen["beats"] is not None and seen["beats"] >= POLICY_FEWEST_BEATS, f"{seen['beats']} beats"
    # Each beat asked for the lease in force the ledger answered.
    assert seam.leases and set(seam.leases) == {POLICY_LEASE}, seam.leases
    history = history_of(database_url, key)
    assert history[-1] == "succeeded" and "unknown" not in history, history
    assert shown(database_url, key) == ("succeeded", None)
    assert warnings_of(caplog, "") == []
    print(f"heartbeats: a call of {POLICY_SLOW:g} s under a policy lease of {POLICY_LEASE:g} s (the client's own "
          f"15 s) had {seen['beats']} beats, the claim's first; {seam.beats_sent()} sent, each asking "
          f"{POLICY_LEASE:g} s")


def test_a_slow_call_beats_by_the_lease_its_actions_policy_sets(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    held_to_the_policy(database_url)
    ledger = Ledger(database_url, requested_by="agent-test")
    assert ledger.heartbeat_lease == 15.0
    seam = Seam().install(ledger)
    seen: dict[str, Any] = {"states": set()}

    @ledger.tool(action=POLICY_ACTION, op_key="refund:{order_id}", target="invoice:{order_id}")
    def refund(order_id: str) -> dict[str, str]:
        key = f"refund:{order_id}"
        ends = time.monotonic() + POLICY_SLOW
        while time.monotonic() < ends:
            seen["states"].add(shown(database_url, key))
            time.sleep(0.25)
        seen["beats"] = beats_of(database_url, key)
        seen["states"].add(shown(database_url, key))
        return {"id": f"re_{order_id}"}

    order = f"HBP-{unique}"
    refund(order)
    policy_call_checks(database_url, f"refund:{order}", seen, seam, caplog)


async def test_a_slow_asyncio_call_beats_by_the_lease_its_actions_policy_sets(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    held_to_the_policy(database_url)
    ledger = AsyncLedger(database_url, requested_by="agent-test")
    seam = Seam().install_async(ledger)
    seen: dict[str, Any] = {"states": set()}

    @ledger.tool(action=POLICY_ACTION, op_key="refund:{order_id}", target="invoice:{order_id}")
    async def refund(order_id: str) -> dict[str, str]:
        key = f"refund:{order_id}"
        ends = time.monotonic() + POLICY_SLOW
        while time.monotonic() < ends:
            seen["states"].add(shown(database_url, key))
            await asyncio.sleep(0.25)
        seen["beats"] = beats_of(database_url, key)
        seen["states"].add(shown(database_url, key))
        return {"id": f"re_{order_id}"}

    order = f"HBPA-{unique}"
    await refund(order)
    policy_call_checks(database_url, f"refund:{order}", seen, seam, caplog)


def test_a_worker_held_to_its_actions_policy_lease_is_unknown_within_it_once_killed(
    database_url: str, unique: str
) -> None:
    held_to_the_policy(database_url)
    order = f"HBPK-{unique}"
    key = f"refund:{order}"
    with subprocess.Popen(
        [sys.executable, str(HERE / "heartbeat_worker.py"), database_url, order, "default", POLICY_ACTION],
        stdout=subprocess.PIPE, text=True,
    ) as worker:
        try:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "started"
            # Beating by the policy's second: by its own 15 s the first beat
            # would come 5 s in, after the claim's lease had run out.
            until(lambda: (beats_of(database_url, key) or 0) >= 3, 5, "two beats by the policy's lease")
            assert shown(database_url, key) == ("pending", None)
            worker.send_signal(signal.SIGKILL)
            killed = time.monotonic()
        finally:
            worker.kill()
    found = None
    while found is None and time.monotonic() - killed < POLICY_LEASE + 5:
        found = one_row(database_url, "select last_error from ledger.unknown_outcomes_at(null) where op_key = %s", key)
        if found is None:
            time.sleep(0.02)
    took = time.monotonic() - killed
    print(f"heartbeats: a worker (its own lease 15 s, its action's policy {POLICY_LEASE:g} s) SIGKILLed mid-call "
          f"after beating was unknown {took:.2f} s later")
    assert found is not None, f"{key} was not unknown {took:.1f} s after its worker was killed"
    assert str(found["last_error"]).startswith("worker_lost"), found
    assert shown(database_url, key) == ("unknown", "worker_lost")
    assert took < POLICY_LEASE + 2


def test_a_lease_a_beat_is_answered_is_followed_from_the_next_beat(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    # An action with no policy yet: the claim holds the client's 3 s; the
    # policy's second, set while the call runs, is answered by the first
    # beat (a second in), and the beats after it go by it.
    action = f"refund_policy_later_{unique}"
    ledger = Ledger(database_url, requested_by="agent-test", heartbeat_lease=3.0)
    seam = Seam().install(ledger)
    seen: dict[str, Any] = {"states": set()}

    @ledger.tool(action=action, op_key="refund:{order_id}", target="invoice:{order_id}")
    def refund(order_id: str) -> dict[str, str]:
        key = f"refund:{order_id}"
        held_to_the_policy(database_url, action)
        ends = time.monotonic() + 2.6
        while time.monotonic() < ends:
            seen["states"].add(shown(database_url, key))
            time.sleep(0.2)
        seen["states"].add(shown(database_url, key))
        return {"id": f"re_{order_id}"}

    order = f"HBPL-{unique}"
    refund(order)
    # The first beat asked for the claim's 3 s and was told 1 s; four more
    # came in the 1.6 s left (by 3 s, one).
    assert seam.leases[:1] == [3.0] and set(seam.leases[1:]) == {1.0} and len(seam.leases) >= 4, seam.leases
    assert seen["states"] == {("pending", None)}, seen["states"]
    history = history_of(database_url, f"refund:{order}")
    assert history[-1] == "succeeded" and "unknown" not in history, history
    assert warnings_of(caplog, "") == []


def test_a_claim_read_back_after_its_reply_was_lost_beats_at_once_to_learn_its_lease(
    database_url: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    held_to_the_policy(database_url)
    ledger = Ledger(database_url, requested_by="agent-test")
    # The begin that claimed the effect (and started the policy's lease) is
    # carried out, its reply lost: the claim read back does not say the
    # lease in force, so the first beat goes at once and its answer does.
    sent = losing(ledger, BEGIN_SQL)
    states: set[tuple[str, str | None]] = set()

    @ledger.tool(action=POLICY_ACTION, op_key="refund:{order_id}", target="invoice:{order_id}")
    def refund(order_id: str) -> dict[str, str]:
        ends = time.monotonic() + 2.5 * POLICY_LEASE
        while time.monotonic() < ends:
            states.add(shown(database_url, f"refund:{order_id}"))
            time.sleep(0.2)
        return {"id": f"re_{order_id}"}

    order = f"HBPR-{unique}"
    refund(order)
    assert sent[BEGIN_SQL] == 1 and sent[HEARTBEAT_SQL] >= 5, sent
    assert states == {("pending", None)}, states
    history = history_of(database_url, f"refund:{order}")
    assert history[-1] == "succeeded" and "unknown" not in history, history
