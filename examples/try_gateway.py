"""Try the effectwatch MCP gateway from Python, with nothing to build.

An agent's side of the gateway, written with the MCP Python SDK 2.x client:
it starts `effectwatch gateway` over stdio in front of a tool server, lists
the tools, calls `refund` twice with the same arguments (as a model retrying
after a lost answer does) and shows that the second answer is the first one
replayed from the effect ledger: the tool server was called once.

It needs `effectwatch` on PATH, a PostgreSQL for the ledger and the MCP
Python SDK 2.x. From the root of the effectwatch repository:

    python3 -m venv /tmp/try-venv && /tmp/try-venv/bin/pip install 'mcp>=2.3,<3'
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/effectwatch   # the ledger
    /tmp/try-venv/bin/python examples/try_gateway.py

The ledger's schema is installed first (`effectwatch migrate`, which changes
nothing on a ledger already up to date). The tool server is, by default,
`effectwatch mcp-tools`, whose refunds go to a payment provider over HTTP:
this script serves a stand-in for that provider on 127.0.0.1 and counts the
refunds asked of it. Any other tool server goes after `--`, for instance one
of the examples in examples/tool_servers (docs/tool-servers.md):

    /tmp/try-venv/bin/python examples/try_gateway.py -- \
        /tmp/try-venv/bin/python examples/tool_servers/python_mcp2/server.py

The policy is examples/gateway.toml unless `--policy` names another; the
binary is `effectwatch` on PATH unless `--effectwatch` names another; the
order refunded is a new one each second unless `--order` names one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, Implementation

EXAMPLES = Path(__file__).resolve().parent


class StandInProvider(BaseHTTPRequestHandler):
    """The payment provider `effectwatch mcp-tools` refunds through: one
    refund per idempotency key, and a count of the refunds asked."""

    refunds: list[dict[str, Any]] = []
    asked = 0

    def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Idempotency-Key")
        StandInProvider.asked += 1
        made = next((r for r in self.refunds if key and r["idempotency_key"] == key), None)
        if made is None:
            made = {**body, "id": f"re_{len(self.refunds) + 1:04d}", "idempotency_key": key}
            self.refunds.append(made)
        self.answer(made)

    def do_GET(self) -> None:  # noqa: N802
        query = parse_qs(urlparse(self.path).query)
        target = query.get("target", [None])[0]
        self.answer({"data": [r for r in self.refunds if r["target"] == target]})

    def answer(self, value: Any) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def said(result: CallToolResult) -> str:
    """The tool's last sentence (a tool may put its JSON before it)."""
    texts = [block.text for block in result.content if block.type == "text"]
    return texts[-1] if texts else "(no text)"


async def call_twice(gateway: list[str], arguments: dict[str, Any], env: dict[str, str]) -> int:
    server = StdioServerParameters(command=gateway[0], args=gateway[1:], env=env)
    me = Implementation(name="try_gateway", version="1")
    # The initialize handshake, on the newest protocol both ends speak.
    async with Client(server, client_info=me) as client:
        tools = await client.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools.tools))
        first = await client.call_tool("refund", arguments)
        print(f"first refund call:  {said(first)}")
        second = await client.call_tool("refund", arguments)
        print(f"second refund call: {said(second)}")
        if first.is_error or second.is_error:
            print("the refund failed: see the gateway's lines on stderr", file=sys.stderr)
            return 1
        if (first.content, first.structured_content) != (second.content, second.structured_content):
            print("the second answer differs from the first", file=sys.stderr)
            return 1
        order_id = arguments["order_id"]
        lookup = await client.call_tool("lookup_refunds", {"order_id": order_id})
        count = (lookup.structured_content or {}).get("count")
        print(f"refunds the tool server's provider holds for {order_id}: {count}")
        return 0 if count == 1 else 1


def op_key(policy: Path, arguments: dict[str, Any]) -> str:
    """The refund's operation key, as the policy's template makes it."""
    template = tomllib.loads(policy.read_text())["tools"]["refund"]["op_key"]
    return re.sub(r"\{(\w+)\}", lambda name: str(arguments[name[1]]), template)


def show_ledger(effectwatch: str, key: str) -> int:
    """What the ledger holds of the call: one dispatch, then a replay."""
    shown = subprocess.run(
        [effectwatch, "show", key, "--format", "json"], capture_output=True, text=True
    )
    if shown.returncode != 0:
        print(f"effectwatch show {key} failed:\n{shown.stderr}", file=sys.stderr)
        return 1
    effect = json.loads(shown.stdout)
    kinds = [attempt["kind"] for attempt in effect["attempts"]]
    state = effect["effect"]["state"]
    print(f"the ledger: {key} is {state}; its attempts: {', '.join(kinds)}")
    if state != "succeeded" or kinds != ["dispatch", "replay"]:
        return 1
    print("the second answer is the replay: the gateway answered it from the ledger,")
    print("and the tool server was called once")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--effectwatch", default="effectwatch", help="the effectwatch binary")
    parser.add_argument("--policy", default=str(EXAMPLES / "gateway.toml"), help="the gateway's policy")
    parser.add_argument("--order", default=f"INV-TRY-{int(time.time())}", help="the order to refund")
    parser.add_argument("upstream", nargs="*", help="the tool server's command (after --)")
    args = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL")
    if not database_url:
        print("set DATABASE_URL to the effect ledger's PostgreSQL URL", file=sys.stderr)
        return 2
    env = {"DATABASE_URL": database_url}
    # The gateway is started with only what its command needs of this
    # environment (the SDK passes on PATH, HOME and a few more).
    migrated = subprocess.run([args.effectwatch, "migrate"], capture_output=True, text=True)
    if migrated.returncode != 0:
        print(f"effectwatch migrate failed:\n{migrated.stderr}", file=sys.stderr)
        return 1
    upstream = args.upstream
    provider = None
    if not upstream:
        provider = ThreadingHTTPServer(("127.0.0.1", 0), StandInProvider)
        threading.Thread(target=provider.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{provider.server_address[1]}"
        upstream = [args.effectwatch, "mcp-tools", "--provider-url", url]
    gateway = [args.effectwatch, "gateway", "--policy", args.policy, "--upstream", *upstream]
    print("gateway:", " ".join(gateway))
    arguments = {"order_id": args.order, "amount_minor": 1500, "currency": "EUR"}
    code = asyncio.run(call_twice(gateway, arguments, env))
    if provider is not None:
        provider.shutdown()
        print(f"refund requests the stand-in provider received: {StandInProvider.asked}")
        code = code or int(StandInProvider.asked != 1)
    return code or show_ledger(args.effectwatch, op_key(Path(args.policy), arguments))


if __name__ == "__main__":
    sys.exit(main())
