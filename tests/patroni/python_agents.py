"""Refund agents on threads, as a user runs the Python client, while the
ledger's leader moves (tests/patroni.rs starts this script, then a
switchover).

    python_agents.py DATABASE_URL PROVIDER_URL THREADS

Every thread shares one `Ledger` on DATABASE_URL (every node of the
cluster, `target_session_attrs=read-write`) and makes refunds at the fake
provider (POST PROVIDER_URL/v1/effects), one key after another, until this
script's stdin closes. Even threads use the decorator (`@ledger.tool`: the
effect begun and claimed in one round trip), odd ones the primitive
(`ledger.effect(...)`, `dispatched()`, `succeeded()`). A call that raised a
connection error — the client had already sent it again, over about 2 s,
and the leader was still away — is made again under the same key, as an
agent would. Prints one JSON line per key, flushed as it is told:
  {"key", "outcome": "succeeded", "ref", "replayed", "retries", "waited"}: told
     recorded (waited: seconds from its first connection error, or 0);
  {"key", "told": "in_flight", "retries", "waited"}: the ledger holds it in flight
     (a first try's claim or completion lost with the leader): not sent again;
  {"key", "error"}: anything else, which the test fails on.
And one line for each time the client said, on the `effectwatch` logger,
that it keeps a provider's answer while the ledger is out of reach:
  {"completion_retry": key, "pause", "out"}: trying the completion again;
  {"completion_gave_up": key, "said"}: past `completion_retry_for`.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import urllib.request
from typing import Any

import psycopg

from effectwatch import InFlight, Ledger

# How long one key may wait for a leader before the agent gives up.
KEY_TIMEOUT = 60.0
# What an agent leaves between two keys (as the Rust agents do).
PACE = 0.02


def since(first_failure: float | None) -> float:
    """Seconds since a key's first connection error, or 0 if it met none."""
    return 0.0 if first_failure is None else round(time.monotonic() - first_failure, 3)


def post_refund(provider_url: str, key: str, target: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{provider_url}/v1/effects",
        data=json.dumps({"kind": "refund", "amount_minor": 1200, "currency": "EUR", "target": target}).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def main() -> None:
    database_url, provider_url, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ledger = Ledger(database_url, requested_by="python-agent")
    stop = threading.Event()
    out = threading.Lock()
    failed = threading.Event()

    def say(**line: Any) -> None:
        with out:
            print(json.dumps(line), flush=True)

    class Retries(logging.Handler):
        """What the client says of a completion kept while the ledger is away."""

        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if "keeping the provider's answer for" in message:
                key, pause, waited = record.args[0], record.args[1], record.args[2]  # type: ignore[index]
                say(completion_retry=key, pause=pause, out=waited)
            elif "is not recorded, and the effect stays dispatched" in message:
                say(completion_gave_up=record.args[1], said=message)  # type: ignore[index]

    logging.getLogger("effectwatch").addHandler(Retries(logging.WARNING))

    @ledger.tool(
        action="refund",
        op_key="refund:{order_id}:v1",
        target="invoice:{order_id}",
        amount_minor="amount_minor",
        currency="currency",
        external_ref=lambda answer: str(answer["id"]),
    )
    def refund(order_id: str, amount_minor: int, currency: str) -> dict[str, Any]:
        return post_refund(provider_url, f"refund:{order_id}:v1", f"invoice:{order_id}")

    def with_decorator(order_id: str) -> tuple[str, Any, bool | None]:
        arguments = {"order_id": order_id, "amount_minor": 1200, "currency": "EUR"}
        key = ledger.intent_of(refund, **arguments).op_key
        # The decorator answers a replay as it answers a first call.
        return key, refund(**arguments), None

    def by_hand(order_id: str) -> tuple[str, Any, bool | None]:
        key, target = f"refund:{order_id}:v1", f"invoice:{order_id}"
        params = {"order_id": order_id, "amount_minor": 1200, "currency": "EUR"}
        with ledger.effect(
            key, action="refund", target=target, params=params, amount_minor=1200, currency="EUR"
        ) as effect:
            effect.dispatched()
            answer = post_refund(provider_url, key, target)
            effect.succeeded(answer["id"], answer)
        return key, effect.result, effect.replayed

    def agent(index: int) -> None:
        call = with_decorator if index % 2 == 0 else by_hand
        k = 0
        while not stop.is_set() and not failed.is_set():
            order_id = f"PY{index}n{k}"
            started = time.monotonic()
            retries = 0
            first_failure: float | None = None
            while True:
                try:
                    key, result, replayed = call(order_id)
                    say(
                        key=key,
                        outcome="succeeded",
                        ref=result["id"],
                        replayed=replayed,
                        retries=retries,
                        waited=since(first_failure),
                    )
                    break
                except InFlight as told:
                    say(key=told.op_key, told="in_flight", state=told.state, retries=retries, waited=since(first_failure))
                    break
                except psycopg.OperationalError as error:
                    retries += 1
                    if first_failure is None:
                        first_failure = time.monotonic()
                    if time.monotonic() - started > KEY_TIMEOUT:
                        say(key=order_id, error=f"no leader for {KEY_TIMEOUT} s: {error}")
                        failed.set()
                        return
                    time.sleep(0.05)
                except Exception as error:  # what the test must see
                    say(key=order_id, error=f"{type(error).__name__}: {error}")
                    failed.set()
                    return
            k += 1
            time.sleep(PACE)

    workers = [threading.Thread(target=agent, args=(index,), name=f"agent-{index}") for index in range(threads)]
    for worker in workers:
        worker.start()
    # The test closes stdin to stop the agents: each finishes its key first.
    sys.stdin.read()
    stop.set()
    for worker in workers:
        worker.join()
    sys.exit(1 if failed.is_set() else 0)


if __name__ == "__main__":
    main()
