"""A fake payment provider on 127.0.0.1, run as a process of its own.

POST /refunds with a JSON body and an Idempotency-Key header records the
call and answers a refund. The body's "behave" picks a failure: "slow"
(answers after "delay" seconds), "drop" (acts, then closes without an
answer), "500", "429". GET /calls/<key> answers how many times the key was
called. Prints its port on the first line of stdout.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

calls: dict[str, int] = {}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        key = self.path.removeprefix("/calls/")
        with lock:
            self.answer(200, {"calls": calls.get(key, 0)})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        key = self.headers.get("Idempotency-Key", "")
        behave = body.get("behave")
        if behave == "429":
            self.answer(429, {"error": "slow down"}, {"Retry-After": "7"})
            return
        with lock:
            calls[key] = calls.get(key, 0) + 1
        if behave == "slow":
            time.sleep(float(body.get("delay", 1)))
        if behave == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if behave == "500":
            self.answer(500, {"error": "internal"})
            return
        self.answer(200, {"id": f"re_{key}", "amount_minor": body.get("amount_minor"), "status": "succeeded"})


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
