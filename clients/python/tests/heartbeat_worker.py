"""A worker process of its own whose provider call never ends: it says
"started" on stdout once the call is under way (its claim has started the
lease), and the heartbeat test kills it there (or once it has beaten).

    python heartbeat_worker.py DATABASE_URL ORDER_ID LEASE_SECONDS [ACTION]

LEASE_SECONDS `default` leaves the client's own default lease; ACTION is
`refund` unless given.
"""

from __future__ import annotations

import sys
import time

from effectwatch import Ledger

if __name__ == "__main__":
    database_url, order_id, lease = sys.argv[1:4]
    action = sys.argv[4] if len(sys.argv) > 4 else "refund"
    ledger = (
        Ledger(database_url, requested_by="agent-worker")
        if lease == "default"
        else Ledger(database_url, requested_by="agent-worker", heartbeat_lease=float(lease))
    )

    @ledger.tool(action=action, op_key="refund:{order_id}", target="invoice:{order_id}")
    def refund(order_id: str) -> None:
        print("started", flush=True)
        while True:
            time.sleep(60)

    refund(order_id)
