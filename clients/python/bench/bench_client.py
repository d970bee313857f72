"""The client's cost per effect against the same SQL calls made by hand
with the same driver, p50/p99 and effects per second, in one process and
in several: a decorated tool whose begin also claims the effect (one round
trip before the provider call, two in all) against the same tool made to
begin, then claim (two before it, three in all, as before
begin_and_dispatch). A database with the ledger's migrations:

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
from effectwatch._core import BEGIN_SQL, COMPLETE_SQL, DISPATCH_SQL, Intent, complete_args, dispatch_args


# The tool's default lease, which the calls made by hand start too.
LEASE = 15.0


def by_tool(url: str, *, one_round_trip: bool) -> Callable[[str], None]:
    """The decorated tool (nothing to validate): its begin claims the
    effect in the same round trip, or (`one_round_trip=False`, as before
    begin_and_dispatch) begin, then dispatch: two."""
    # Heartbeats on, as by default: the claim starts the call's lease in
    # the same statement, and the first beat is due a third of a lease
    # (5 s) after it, so a call that answers at once, as this one does,
    # sends no beat: the round trips counted below are all it makes.
    ledger = Ledger(url, requested_by="bench")
    ledger._one_round_trip = one_round_trip

    @ledger.tool(action="refund", op_key="bench:{key}", target="invoice:{key}")
    def refund(key: str) -> dict[str, bool]:
        return {"ok": True}

    def one(key: str) -> None:
        refund(key)

    return one


def by_hand(url: str, *, one_round_trip: bool) -> Callable[[str], None]:
    """The same statements, the claim starting the same lease as the tool's."""
    connection = psycopg.connect(url, autocommit=True, prepare_threshold=None)

    def one(key: str) -> None:
        key = f"bench:{key}"
        target = f"invoice:{key}"
        intent = Intent(key, "refund", target, {"amount_minor": 100})
        connection.execute(BEGIN_SQL, intent.begin_args("bench", dispatch=one_round_trip, lease=LEASE))
        if not one_round_trip:
            connection.execute(DISPATCH_SQL, dispatch_args(key, target, None, "bench", LEASE))
        connection.execute(
            COMPLETE_SQL, complete_args(key, target, "succeeded", "bench", external_ref="re_1", result={"ok": True})
        )

    return one


WAYS: dict[str, Callable[[str], Callable[[str], None]]] = {
    "by hand, begin + dispatch + complete": lambda url: by_hand(url, one_round_trip=False),
    "by hand, begin_and_dispatch + complete": lambda url: by_hand(url, one_round_trip=True),
    "decorated tool, 3 round trips (before)": lambda url: by_tool(url, one_round_trip=False),
    "decorated tool, 2 round trips (now)": lambda url: by_tool(url, one_round_trip=True),
}


def run(args: tuple[str, str, int]) -> tuple[list[float], float]:
    url, how, effects = args
    one = WAYS[how](url)
    prefix = f"{uuid.uuid4().hex[:12]}-"
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
        for how in WAYS:
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
