"""A ledger out of reach between the provider's answer and its completion,
as in a failover: the client keeps the answer and sends the completion
again with backoff, for up to `completion_retry_for` seconds, saying so at
warning; the completion is then written once, and the effect ends
succeeded. With `completion_retry_for=0` it gives up after its three usual
tries, as before, and the effect stays dispatched for the reconciler.

The outage is real: the client reaches the server through a TCP proxy in
this test which, cut, drops the connections it carries and closes every
new one at once, then forwards again."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from typing import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from effectwatch import AsyncLedger, Intent, Ledger
from test_client import effect_row

OUTAGE = 3.0


class Proxy:
    """Forwards TCP connections on 127.0.0.1 to the ledger's server; `cut`
    drops the ones open and, for that many seconds, every new one."""

    def __init__(self, database_url: str) -> None:
        info = conninfo_to_dict(database_url)
        host = str(info.get("host") or os.environ.get("PGHOST") or "127.0.0.1").split(",")[0]
        port = int(str(info.get("port") or os.environ.get("PGPORT") or 5432).split(",")[0])
        self._upstream: tuple[int, str | tuple[str, int]] = (
            (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}") if host.startswith("/") else (socket.AF_INET, (host, port))
        )
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.url = make_conninfo(database_url, host="127.0.0.1", port=str(self.port))
        self._cut_until = 0.0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self, seconds: float) -> None:
        with self._lock:
            self._cut_until = time.monotonic() + seconds
            carried, self._open = self._open, []
        for connection in carried:
            self._drop(connection)

    def close(self) -> None:
        self._closed = True
        self.cut(0)
        self._listener.close()

    @staticmethod
    def _drop(connection: socket.socket) -> None:
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        connection.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if time.monotonic() < self._cut_until:
                self._drop(client)
                continue
            family, address = self._upstream
            server = socket.socket(family, socket.SOCK_STREAM)
            try:
                server.connect(address)
            except OSError:
                self._drop(client)
                continue
            with self._lock:
                self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        self._drop(source)
        self._drop(sink)


@pytest.fixture
def proxy(database_url: str) -> Iterator[Proxy]:
    proxy = Proxy(database_url)
    try:
        yield proxy
    finally:
        proxy.close()


def retries_of(caplog: pytest.LogCaptureFixture, key: str) -> list[str]:
    return [
        record.getMessage() for record in caplog.records
        if record.name == "effectwatch" and record.levelno == logging.WARNING
        and f"keeping the provider's answer for {key} and trying again in" in record.getMessage()
    ]


def test_a_completion_outlasts_a_ledger_out_of_reach_and_is_written_once(
    database_url: str, proxy: Proxy, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = Ledger(proxy.url, requested_by="agent-test", heartbeat_lease=None)
    key, target = f"refund:CR-{unique}", f"invoice:CR-{unique}"
    intent = Intent(key, "refund", target, {"amount_minor": 1500}, request_id=f"cr-{unique}")
    begun = ledger.begin(intent, dispatch=True)
    assert (begun.decision, begun.dispatched) == ("proceed", True)
    # The provider answered; the ledger goes away before its completion.
    proxy.cut(OUTAGE)
    started = time.monotonic()
    completed = ledger.complete(key, target=target, outcome="succeeded", request_id=intent.request_id,
                                external_ref="re_cr", result={"id": "re_cr"})
    waited = time.monotonic() - started
    assert completed.state == "succeeded" and not completed.late and not completed.refused, completed
    assert OUTAGE - 0.5 < waited < OUTAGE + 4, waited
    said = retries_of(caplog, key)
    # Pauses 0.2, 0.4, 0.8, 1.6 s...: more tries than the usual three.
    assert len(said) >= 4, said
    row = effect_row(database_url, key)
    assert (row["state"], row["external_ref"], row["request_id"]) == ("succeeded", "re_cr", intent.request_id)


def test_a_completion_retry_for_of_zero_gives_up_as_before(
    database_url: str, proxy: Proxy, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = Ledger(proxy.url, requested_by="agent-test", heartbeat_lease=None, completion_retry_for=0)
    key, target = f"refund:CR0-{unique}", f"invoice:CR0-{unique}"
    intent = Intent(key, "refund", target, {"amount_minor": 1500}, request_id=f"cr0-{unique}")
    assert ledger.begin(intent, dispatch=True).dispatched
    proxy.cut(OUTAGE + 2)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        ledger.complete(key, target=target, outcome="succeeded", request_id=intent.request_id, external_ref="re_cr0")
    assert 1.5 < time.monotonic() - started < OUTAGE + 1
    assert retries_of(caplog, key) == []
    row = effect_row(database_url, key)
    assert (row["state"], row["dispatched_at"] is not None) == ("pending", True)


def test_a_completion_gives_up_after_its_bound_and_says_so(
    database_url: str, proxy: Proxy, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    ledger = Ledger(proxy.url, requested_by="agent-test", heartbeat_lease=None, completion_retry_for=1.5)
    key, target = f"refund:CRB-{unique}", f"invoice:CRB-{unique}"
    intent = Intent(key, "refund", target, {"amount_minor": 1500}, request_id=f"crb-{unique}")
    assert ledger.begin(intent, dispatch=True).dispatched
    proxy.cut(OUTAGE + 2)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        ledger.complete(key, target=target, outcome="succeeded", request_id=intent.request_id, external_ref="re_crb")
    assert 1.4 < time.monotonic() - started < OUTAGE
    assert retries_of(caplog, key)
    gave_up = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert any(key in said and "stays dispatched for the reconciler" in said for said in gave_up), gave_up
    row = effect_row(database_url, key)
    assert (row["state"], row["dispatched_at"] is not None) == ("pending", True)


def test_an_async_completion_outlasts_a_ledger_out_of_reach(
    database_url: str, proxy: Proxy, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="effectwatch")
    key, target = f"refund:CRA-{unique}", f"invoice:CRA-{unique}"
    intent = Intent(key, "refund", target, {"amount_minor": 1500}, request_id=f"cra-{unique}")

    async def run() -> float:
        ledger = AsyncLedger(proxy.url, requested_by="agent-test", heartbeat_lease=None)
        assert (await ledger.begin(intent, dispatch=True)).dispatched
        proxy.cut(OUTAGE)
        started = time.monotonic()
        completed = await ledger.complete(key, target=target, outcome="succeeded", request_id=intent.request_id,
                                          external_ref="re_cra")
        assert completed.state == "succeeded" and not completed.late, completed
        return time.monotonic() - started

    waited = asyncio.run(run())
    assert OUTAGE - 0.5 < waited < OUTAGE + 4, waited
    assert len(retries_of(caplog, key)) >= 4
    assert effect_row(database_url, key)["state"] == "succeeded"
