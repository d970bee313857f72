"""Through a real PgBouncer in transaction mode (EFFECTWATCH_TEST_PGBOUNCER_URL,
which the repository's `cargo test` sets where PgBouncer is installed): the
client's calls never lean on a statement prepared earlier, and the same run
with psycopg's statement preparation switched on fails."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from effectwatch import Ledger
from test_heartbeats import LEASE, beats_of, history_of, shown

EFFECTS = 500
THREADS = 8


@pytest.fixture
def pgbouncer_url() -> str:
    url = os.environ.get("EFFECTWATCH_TEST_PGBOUNCER_URL")
    if not url:
        pytest.fail("EFFECTWATCH_TEST_PGBOUNCER_URL is unset: name the ledger's database through PgBouncer")
    return url


class PreparingLedger(Ledger):
    """The client as it would be with psycopg's default preparation, made
    eager: what the guard (`prepare_threshold=None`) is there to prevent."""

    def _connect(self) -> psycopg.Connection[dict[str, Any]]:
        return psycopg.connect(self.conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row)


def run_effects(ledger: Ledger, prefix: str, count: int) -> list[BaseException]:
    errors: list[BaseException] = []

    def worker(first: int) -> None:
        for n in range(first, count, THREADS):
            key, target = f"refund:{prefix}-{n}", f"invoice:{prefix}-{n}"
            try:
                with ledger.effect(key, action="refund", target=target, params={"amount_minor": n}) as e:
                    e.dispatched()
                    e.succeeded(f"re_{n}", {"n": n})
            except BaseException as error:
                errors.append(error)

    threads = [threading.Thread(target=worker, args=(first,)) for first in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_500_effects_through_pgbouncer_in_transaction_mode_make_no_error(pgbouncer_url: str, unique: str) -> None:
    errors = run_effects(Ledger(pgbouncer_url, requested_by="agent-pooled"), f"PGB-{unique}", EFFECTS)
    assert errors == [], f"{len(errors)} of {EFFECTS} effects failed; first: {errors[0]!r}"
    with psycopg.connect(pgbouncer_url, autocommit=True, prepare_threshold=None) as connection:
        row = connection.execute(
            "select count(*) from ledger.effects where op_key like %s and state = 'succeeded'",
            (f"refund:PGB-{unique}-%",),
        ).fetchone()
    assert row is not None and row[0] == EFFECTS
    print(f"PgBouncer transaction mode: {EFFECTS} effects, {3 * EFFECTS} ledger calls, 0 errors")


def test_prepared_statements_through_pgbouncer_fail(pgbouncer_url: str, unique: str) -> None:
    errors = run_effects(PreparingLedger(pgbouncer_url, requested_by="agent-pooled"), f"PREP-{unique}", 100)
    assert errors, "prepared statements through PgBouncer in transaction mode raised nothing: the guard proves nothing"
    assert any(isinstance(error, psycopg.Error) and "prepared statement" in str(error) for error in errors), errors[:3]
    print(f"with preparation switched on: {len(errors)} of 100 effects failed, e.g. {errors[0]}")


def test_a_slow_call_through_pgbouncer_keeps_beating(pgbouncer_url: str, unique: str) -> None:
    ledger = Ledger(pgbouncer_url, requested_by="agent-pooled", heartbeat_lease=LEASE)
    seen: dict[str, Any] = {}

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    def refund(order_id: str) -> dict[str, str]:
        time.sleep(2.3 * LEASE)
        seen["beats"] = beats_of(pgbouncer_url, f"refund:{order_id}")
        seen["during"] = shown(pgbouncer_url, f"refund:{order_id}")
        return {"id": f"re_{order_id}"}

    key = f"refund:PGB-HB-{unique}"
    refund(f"PGB-HB-{unique}")
    # The claim's, then one every third of a lease: never fewer than the
    # claim's and one in each lease after it.
    assert seen["beats"] is not None and seen["beats"] >= 3, f"{seen['beats']} beats in {2.3 * LEASE:g} s"
    assert seen["during"] == ("pending", None)
    history = history_of(pgbouncer_url, key)
    assert set(history) == {"pending", "succeeded"} and history[-1] == "succeeded", history
    print(f"PgBouncer transaction mode: a call of {2.3 * LEASE:g} s had {seen['beats']} beats (the claim's first), "
          "never unknown")
