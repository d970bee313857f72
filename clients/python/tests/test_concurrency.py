"""Many callers of one key, and a caller killed mid-call: the provider is
called once, whoever asks and however they die."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent import refund_tool, until_settled
from effectwatch import InFlight, Ledger
from test_client import effect_row, provider_calls

AGENT = str(Path(__file__).parent / "agent.py")
THREADS = 20
PROCESSES = 4


def test_twenty_threads_and_four_processes_call_the_provider_once(
    database_url: str, provider_url: str, unique: str
) -> None:
    order_id = f"CC-{unique}"
    key = f"refund:{order_id}:AP-1"
    processes = [
        subprocess.Popen(
            [sys.executable, AGENT, database_url, provider_url, order_id, "slow", "1.0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    refund = refund_tool(Ledger(database_url, requested_by="agent-thread"), provider_url, "slow", 1.0)
    barrier = threading.Barrier(THREADS)
    answers: list[tuple[Any, int]] = []
    errors: list[BaseException] = []

    def one_caller() -> None:
        barrier.wait()
        try:
            answers.append(until_settled(refund, order_id, "AP-1", 1500, "EUR"))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=one_caller) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    outputs = [json.loads(process.communicate(timeout=60)[0]) for process in processes]
    assert not errors, errors
    assert [process.returncode for process in processes] == [0] * PROCESSES
    results = [result for result, _ in answers] + [output["result"] for output in outputs]
    assert len(results) == THREADS + PROCESSES
    assert all(result == results[0] for result in results), results
    assert provider_calls(provider_url, key) == 1
    told_in_flight = sum(in_flight > 0 for _, in_flight in answers) + sum(o["in_flight"] > 0 for o in outputs)
    assert told_in_flight >= 1, "nobody saw the effect in flight while the provider was slow"
    assert effect_row(database_url, key)["state"] == "succeeded"


def unknown_pane_lists(database_url: str, key: str) -> bool:
    """Whether `effectwatch list unknown` shows the key: the real binary when
    the test command names it, else the view the command reads."""
    binary = os.environ.get("EFFECTWATCH_BIN")
    if binary:
        listed = subprocess.run(
            [binary, "--database-url", database_url, "list", "unknown", "--format", "json"],
            capture_output=True, text=True, check=True,
        )
        listing = json.loads(listed.stdout)
        # The pane's rows: the listing itself, or (since the listing says
        # what it shows) its "rows".
        rows = listing["rows"] if isinstance(listing, dict) else listing
        return any(row.get("op_key") == key for row in rows)
    with psycopg.connect(database_url, autocommit=True) as connection:
        found = connection.execute("select 1 from ledger.unknown_outcomes where op_key = %s", (key,)).fetchone()
    return found is not None


def test_a_caller_killed_after_dispatch_is_never_repeated(
    database_url: str, provider_url: str, unique: str
) -> None:
    # An action whose window is one second, so the rerun comes after it.
    action = "refund_killed"
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "select * from ledger.op_set_policy(action => %s, operator => 'ops', reason => 'a short window',"
            " pending_window => interval '1 second')",
            (action,),
        )
    order_id = f"KILL-{unique}"
    key = f"refund:{order_id}:AP-1"
    process = subprocess.Popen(
        [sys.executable, AGENT, database_url, provider_url, order_id, "slow", "30", action], stdout=subprocess.PIPE
    )
    deadline = time.monotonic() + 30
    while provider_calls(provider_url, key) == 0:
        assert time.monotonic() < deadline, "the agent never reached the provider"
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()

    row = effect_row(database_url, key)
    assert row["state"] == "pending" and row["dispatched_at"] is not None
    time.sleep(1.2)
    refund = refund_tool(Ledger(database_url, requested_by="agent-process"), provider_url, action=action)
    with pytest.raises(InFlight) as in_flight:
        refund(order_id, "AP-1", 1500, "EUR")
    assert "Do not call it again" in str(in_flight.value)
    assert provider_calls(provider_url, key) == 1
    # Asked again after its window with no answer: an unknown outcome, shown
    # where an operator settles outcomes nobody can prove.
    assert effect_row(database_url, key)["state"] == "unknown"
    assert unknown_pane_lists(database_url, key)

    # An operator who saw the refund at the provider settles it; the next
    # call replays what was stored (nothing: the operator gave a reference).
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "select * from ledger.op_resolve(op_key => %s, expected_version => %s, operator => 'ops',"
            " reason => 'provider shows the refund', outcome => 'succeeded', external_ref => %s)",
            (key, effect_row(database_url, key)["version"], f"re_{key}"),
        )
    assert refund(order_id, "AP-1", 1500, "EUR") is None
    assert provider_calls(provider_url, key) == 1
    assert not unknown_pane_lists(database_url, key)
