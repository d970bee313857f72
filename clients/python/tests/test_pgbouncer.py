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

from psycopg_pool import ConnectionPool

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
    """The client as it would be without its guard (`prepare=False` on every
    statement, whatever the pool's connections say), on a pool whose
    connections prepare every statement: what the guard is there to
    prevent."""

    _prepare = None


def preparing(pgbouncer_url: str) -> PreparingLedger:
    pool = ConnectionPool(
        pgbouncer_url, kwargs={"autocommit": True, "prepare_threshold": 0}, min_size=THREADS, open=True
    )
    return PreparingLedger(pool=pool, requested_by="agent-pooled")


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
    ledger = preparing(pgbouncer_url)
    try:
        errors = run_effects(ledger, f"PREP-{unique}", 100)
    finally:
        ledger.pool.close()
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


def test_a_pool_of_the_callers_through_pgbouncer_keeps_its_statement_timeout(
    pgbouncer_url: str, database_url: str, unique: str
) -> None:
    # psycopg's defaults: not autocommit, statements prepared from their
    # fifth run. The ledger sends each call as `begin; set local
    # statement_timeout`, the statement, `commit`, never prepared.
    with ConnectionPool(pgbouncer_url, min_size=2, max_size=THREADS, open=True) as pool:
        with pool.connection() as connection:
            before = connection.execute("show statement_timeout").fetchone()
        ledger = Ledger(pool=pool, requested_by="agent-pooled", statement_timeout_ms=5_000)
        errors = run_effects(ledger, f"PGBP-{unique}", 200)
        assert errors == [], f"{len(errors)} of 200 effects failed; first: {errors[0]!r}"
        # The timeout reaches the server through the pooler: a begin kept
        # waiting on the effect's row is cancelled after it.
        bounded = Ledger(pool=pool, requested_by="agent-pooled", statement_timeout_ms=300)
        key, target = f"refund:PGBT-{unique}", f"invoice:PGBT-{unique}"
        with bounded.effect(key, action="refund", target=target, params={"amount_minor": 1}):
            pass  # the block ends before dispatched(): failed, retryable
        with psycopg.connect(database_url) as holder:
            holder.execute("select 1 from ledger.effects where op_key = %s for update", (key,))
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled):
                with bounded.effect(key, action="refund", target=target, params={"amount_minor": 1}):
                    pass
            took = time.monotonic() - started
        assert took < 3, took
        # And it was the transaction's own: the pool's connections keep theirs.
        with pool.connection() as connection:
            row = connection.execute("show statement_timeout").fetchone()
        assert row == before and row != ("300ms",), (row, before)
    print(f"PgBouncer transaction mode, a pool of the caller's: 200 effects, 0 errors; "
          f"a 300 ms statement timeout set per transaction cancelled a held begin in {took:.2f} s")
