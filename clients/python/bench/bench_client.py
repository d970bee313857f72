"""The client's cost per effect against the same three SQL calls made by
hand with the same driver, p50/p99 and effects per second, in one process
and in several. A database with the ledger's migrations:

    python bench/bench_client.py postgres://.../ledger [effects] [processes]
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from typing import Callable

import psycopg

from effectwatch import Ledger
from effectwatch._core import BEGIN_SQL, COMPLETE_SQL, DISPATCH_SQL, Intent, complete_args


def by_client(url: str) -> Callable[[str], None]:
    ledger = Ledger(url, requested_by="bench")

    def one(key: str) -> None:
        with ledger.effect(key, action="refund", target=f"invoice:{key}", params={"amount_minor": 100}) as e:
            e.dispatched()
            e.succeeded("re_1", {"ok": True})

    return one


def by_hand(url: str) -> Callable[[str], None]:
    connection = psycopg.connect(url, autocommit=True, prepare_threshold=None)

    def one(key: str) -> None:
        target = f"invoice:{key}"
        connection.execute(BEGIN_SQL, Intent(key, "refund", target, {"amount_minor": 100}).begin_args("bench"))
        connection.execute(DISPATCH_SQL, {"op_key": key, "target": target, "request_id": None, "worker": "bench"})
        connection.execute(
            COMPLETE_SQL, complete_args(key, target, "succeeded", "bench", external_ref="re_1", result={"ok": True})
        )

    return one


def run(args: tuple[str, str, int]) -> tuple[list[float], float]:
    url, how, effects = args
    one = by_client(url) if how == "client" else by_hand(url)
    prefix = f"bench:{how}:{uuid.uuid4().hex[:8]}:"
    took = []
    began = time.perf_counter()
    for n in range(effects):
        started = time.perf_counter()
        one(f"{prefix}{n}")
        took.append(time.perf_counter() - started)
    return took, time.perf_counter() - began


def main() -> None:
    url = sys.argv[1]
    effects = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    for processes in (1, int(sys.argv[3]) if len(sys.argv) > 3 else 8):
        for how in ("by hand, one held connection", "client"):
            with ProcessPoolExecutor(processes) as pool:
                parts = list(pool.map(run, [(url, how, effects)] * processes))
            took = [t for part, _ in parts for t in part]
            # Process start-up left out: from each one's first effect to its last.
            wall = max(elapsed for _, elapsed in parts)
            quantiles = statistics.quantiles(took, n=100)
            print(
                f"{processes} process(es), {how}: p50 {quantiles[49] * 1000:.2f} ms, "
                f"p99 {quantiles[98] * 1000:.2f} ms, {len(took) / wall:.0f} effects/s"
            )


if __name__ == "__main__":
    main()
