"""Where a ledger's connections come from (README, "Connections and
PgBouncer"): a psycopg_pool pool it makes on its conninfo, or the caller's
pool (`pool=`), used as it is — its statements never prepared and each
call autocommit whatever the pool's connections say, the statement timeout
set in each call's own transaction — and, after a fork, never the
parent's connections."""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.connection
import time
from typing import Any, Callable

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed

from effectwatch import AsyncLedger, Intent, Ledger, Misuse
from effectwatch._core import BEGIN_SQL
from test_heartbeats import beats_of
from test_lost_reply import losing

BACKEND = "select pg_backend_pid() as pid"


def backend_of(ledger: Ledger) -> int:
    """The server process of the connection the ledger's next call gets."""
    row = ledger._one(BACKEND, {})
    assert row is not None
    return int(row["pid"])


async def backend_of_async(ledger: AsyncLedger) -> int:
    row = await ledger._one(BACKEND, {})
    assert row is not None
    return int(row["pid"])


def settled(ledger: Ledger, key: str) -> None:
    with ledger.effect(key, action="refund", target=f"invoice:{key}", params={"amount_minor": 100}) as e:
        e.dispatched()
        e.succeeded(f"re_{key}", {"id": f"re_{key}"})


async def settled_async(ledger: AsyncLedger, key: str) -> None:
    async with ledger.effect(key, action="refund", target=f"invoice:{key}", params={"amount_minor": 100}) as e:
        await e.dispatched()
        await e.succeeded(f"re_{key}", {"id": f"re_{key}"})


def test_a_ledger_is_made_on_a_conninfo_or_a_pool(database_url: str) -> None:
    with pytest.raises(ValueError, match="one of the two"):
        Ledger(requested_by="agent-test")
    with ConnectionPool(database_url, min_size=0, max_size=1, open=True) as pool:
        with pytest.raises(ValueError, match="one of the two"):
            Ledger(database_url, pool=pool, requested_by="agent-test")
        with pytest.raises(ValueError, match="set them on the pool you pass"):
            Ledger(pool=pool, requested_by="agent-test", application_name="mine")
        with pytest.raises(ValueError, match="set them on the pool you pass"):
            Ledger(pool=pool, requested_by="agent-test", max_connections=3)
    with pytest.raises(ValueError, match="statement_timeout_ms"):
        Ledger(database_url, requested_by="agent-test", statement_timeout_ms=-1)
    with pytest.raises(ValueError, match="max_connections"):
        Ledger(database_url, requested_by="agent-test", max_connections=0)


def test_the_ledgers_own_pool_names_its_connections_and_starts_them_with_the_timeout(database_url: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test", statement_timeout_ms=1234, max_connections=3)
    try:
        row = ledger._one("select current_setting('statement_timeout') as timeout,"
                          " current_setting('application_name') as name", {})
        assert row == {"timeout": "1234ms", "name": "effectwatch-python"}
        assert ledger.pool.max_size == 3 and ledger.pool.min_size == 0
    finally:
        ledger.close()
    # Closed, it says so at once rather than trying again.
    started = time.monotonic()
    with pytest.raises(PoolClosed):
        ledger.state_of("refund:closed")
    assert time.monotonic() - started < 0.5


def test_a_pool_of_the_callers_is_used_as_it_is(database_url: str, unique: str) -> None:
    # psycopg's defaults: not autocommit, tuple rows, statements prepared
    # from their fifth run on a connection.
    with ConnectionPool(database_url, min_size=1, max_size=1, open=True) as pool:
        ledger = Ledger(pool=pool, requested_by="agent-test")
        assert ledger.pool is pool and ledger.conninfo is None and ledger.application_name is None
        requests = pool.get_stats().get("requests_num", 0)
        for n in range(8):
            settled(ledger, f"refund:POOL-{unique}-{n}")
        # Every call took its connection from the caller's pool (one, here)...
        assert pool.get_stats().get("requests_num", 0) - requests >= 24
        with pool.connection() as connection:
            # ...and gave it back as it was: not autocommit, nothing prepared,
            # no transaction left open.
            assert connection.autocommit is False
            assert connection.execute("select count(*) from pg_prepared_statements").fetchone() == (0,)
        assert ledger.state_of(f"refund:POOL-{unique}-7") == "succeeded"
        ledger.close()  # the pool is the caller's: still open
        assert ledger.state_of(f"refund:POOL-{unique}-7") == "succeeded"


async def test_an_asyncio_ledger_on_a_pool_of_the_callers(database_url: str, unique: str) -> None:
    async with AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False) as pool:
        ledger = AsyncLedger(pool=pool, requested_by="agent-test")
        for n in range(6):
            await settled_async(ledger, f"refund:APOOL-{unique}-{n}")
        async with pool.connection() as connection:
            assert connection.autocommit is False
            cursor = await connection.execute("select count(*) from pg_prepared_statements")
            assert await cursor.fetchone() == (0,)
        assert await ledger.state_of(f"refund:APOOL-{unique}-5") == "succeeded"
        await ledger.close()
        assert await ledger.state_of(f"refund:APOOL-{unique}-5") == "succeeded"


def held_begin(database_url: str, key: str, begin: Callable[[], Any]) -> float:
    """How long `begin` of `key` took to be cancelled while another
    transaction holds the effect's row."""
    with psycopg.connect(database_url) as holder:
        holder.execute("select 1 from ledger.effects where op_key = %s for update", (key,))
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            begin()
        return time.monotonic() - started


def test_on_a_pool_of_the_callers_the_statement_timeout_is_set_in_each_transaction(
    database_url: str, unique: str
) -> None:
    key, target = f"refund:PTO-{unique}", f"invoice:PTO-{unique}"
    intent = Intent(key, "refund", target, {"amount_minor": 1})
    with ConnectionPool(database_url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True) as pool:
        ledger = Ledger(pool=pool, requested_by="agent-test", statement_timeout_ms=300)
        sent = losing(ledger, "no statement is lost")
        assert ledger.begin(intent).decision == "proceed"
        took = held_begin(database_url, key, lambda: ledger.begin(intent))
        assert 0.25 < took < 3, took
        assert sent[BEGIN_SQL] == 2  # a statement the server cancelled is not sent again
        with pool.connection() as connection:
            # `set local`: the pool's connection keeps its own timeout, and
            # no transaction is left open.
            assert connection.execute("show statement_timeout").fetchone() == ("0",)
            assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        # Without a timeout the pool's calls are not bounded by the ledger.
        unbounded = Ledger(pool=pool, requested_by="agent-test")
        assert unbounded._set_local is None and ledger._set_local is not None


async def test_on_an_asyncio_pool_of_the_callers_the_statement_timeout_is_set_too(
    database_url: str, unique: str
) -> None:
    key, target = f"refund:APTO-{unique}", f"invoice:APTO-{unique}"
    intent = Intent(key, "refund", target, {"amount_minor": 1})
    async with AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False) as pool:
        ledger = AsyncLedger(pool=pool, requested_by="agent-test", statement_timeout_ms=300)
        assert (await ledger.begin(intent)).decision == "proceed"
        async with await psycopg.AsyncConnection.connect(database_url) as holder:
            await holder.execute("select 1 from ledger.effects where op_key = %s for update", (key,))
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled):
                await ledger.begin(intent)
            took = time.monotonic() - started
        assert 0.25 < took < 3, took
        async with pool.connection() as connection:
            cursor = await connection.execute("show statement_timeout")
            assert await cursor.fetchone() == ("0",)


def test_a_lost_reply_on_a_pool_of_the_callers_is_sent_again_through_it(database_url: str, unique: str) -> None:
    with ConnectionPool(database_url, min_size=2, max_size=2, open=True) as pool:
        pool.wait()
        ledger = Ledger(pool=pool, requested_by="agent-test", statement_timeout_ms=5_000)
        sent = losing(ledger, BEGIN_SQL)
        key = f"refund:PLR-{unique}"
        settled(ledger, key)
        # The begin's reply was lost; read back, its first send had begun
        # the effect for this attempt, and the call went on.
        assert sent[BEGIN_SQL] == 1
        assert ledger.state_of(key) == "succeeded"
        assert pool.get_stats().get("connections_lost", 0) + pool.get_stats().get("returns_bad", 0) >= 1


# After a fork: the child's ledger calls never go out on the parent's
# connections. Each child answers through a pipe.

FORK = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
needs_fork = pytest.mark.skipif(FORK is None, reason="no fork on this platform")
# Python 3.12 and later warn of a fork in a process with threads (the
# pools' and the heartbeats'): what these tests are about.
forks_with_threads = pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork.*:DeprecationWarning")


def in_child(work: Callable[[], object]) -> object:
    """What `work` answered (or raised, as its text) in a forked child."""
    assert FORK is not None
    reading, writing = FORK.Pipe(duplex=False)

    def run(answer: multiprocessing.connection.Connection) -> None:
        try:
            answer.send(("ok", work()))
        except BaseException as error:
            answer.send(("raised", f"{type(error).__name__}: {error}"))

    child = FORK.Process(target=run, args=(writing,))
    child.start()
    try:
        if not reading.poll(60):
            raise AssertionError("the forked child answered nothing within 60 s")
        said: object = reading.recv()
        return said
    finally:
        child.join(10)


@needs_fork
@forks_with_threads
def test_a_forked_child_makes_its_own_pool_and_beats_on_its_own(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by="agent-test", heartbeat_lease=1.0)
    slow_key = f"FORK-{unique}-slow"
    beats: list[int | None] = []

    @ledger.tool(action="refund", op_key="refund:{order_id}", target="invoice:{order_id}")
    def slow(order_id: str) -> dict[str, str]:
        time.sleep(1.2)
        beats.append(beats_of(database_url, f"refund:{order_id}"))
        return {"id": f"re_{order_id}"}

    slow(f"{slow_key}-parent")  # the parent's pool open, and its heartbeat thread running
    parents = {connection.info.backend_pid for connection in ledger.pool._pool}
    assert parents

    def child() -> object:
        settled(ledger, f"refund:FORK-{unique}-child")
        slow(f"{slow_key}-child")
        return backend_of(ledger), beats[-1]

    said = in_child(child)
    assert isinstance(said, tuple) and said[0] == "ok", said
    child_backend, child_beats = said[1]
    assert child_backend not in parents, "the child talked on a connection of its parent's"
    # The child's call beat from a thread of its own (the claim's beat and
    # more), and the parent's connections are still the parent's, unharmed.
    assert child_beats is not None and child_beats >= 3, child_beats
    assert ledger.state_of(f"refund:FORK-{unique}-child") == "succeeded"
    assert {backend_of(ledger) for _ in range(2 * len(parents))} <= parents
    assert not ledger.pool.get_stats().get("returns_bad")
    ledger.close()


@needs_fork
@forks_with_threads
def test_a_forked_child_of_an_asyncio_ledger_makes_its_own_pool(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by="agent-test")
    parents = asyncio.run(backend_of_async(ledger))

    def child() -> object:
        async def work() -> int:
            await settled_async(ledger, f"refund:AFORK-{unique}-child")
            return await backend_of_async(ledger)

        return asyncio.run(work())

    said = in_child(child)
    assert isinstance(said, tuple) and said[0] == "ok", said
    assert said[1] != parents


@needs_fork
@forks_with_threads
def test_a_ledger_on_a_given_pool_refuses_to_go_on_in_a_forked_child(database_url: str, unique: str) -> None:
    with ConnectionPool(database_url, min_size=1, max_size=1, open=True) as pool:
        ledger = Ledger(pool=pool, requested_by="agent-test")
        settled(ledger, f"refund:GFORK-{unique}-parent")
        parents = backend_of(ledger)

        def child() -> object:
            settled(ledger, f"refund:GFORK-{unique}-child")
            return "the child used its parent's pool"

        said = in_child(child)
        assert isinstance(said, tuple) and said[0] == "raised", said
        assert str(said[1]).startswith(f"{Misuse.__name__}: this ledger was given its pool in process"), said
        assert ledger.state_of(f"refund:GFORK-{unique}-child") is None
        assert backend_of(ledger) == parents
