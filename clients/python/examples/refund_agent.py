"""A refund agent against `effectwatch demo`: three refunds, each asked twice
(the second time is a replay, the provider is not called again), and one
whose reply is lost on purpose — it shows in the console's unknown pane
until the reconciler or an operator settles it.

    effectwatch demo            # in one terminal; it prints a config path:
                                # "effectwatch --config /tmp/effectwatch-demo-operator-N.toml"
    python examples/refund_agent.py --config /tmp/effectwatch-demo-operator-N.toml

or name the two URLs: --database-url postgres://... --provider-url http://127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
import urllib.error
import urllib.request
import uuid
from typing import Any

from effectwatch import EffectError, Ledger, ProviderError, RateLimited


def urls(arguments: argparse.Namespace) -> tuple[str, str]:
    if arguments.config:
        with open(arguments.config, "rb") as file:
            config = tomllib.load(file)
        return config["database_url"], config["providers"]["demo-payments"]["base_url"]
    if not (arguments.database_url and arguments.provider_url):
        sys.exit("name the demo's config (--config) or both --database-url and --provider-url")
    return arguments.database_url, arguments.provider_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config")
    parser.add_argument("--database-url")
    parser.add_argument("--provider-url")
    database_url, provider_url = urls(parser.parse_args())
    ledger = Ledger(database_url, requested_by="refund-agent.py")

    # The key comes from the business arguments: the same refund asked
    # twice is one key, whatever turn or tool-call id asked for it.
    @ledger.tool(
        action="refund",
        op_key="refund:{invoice}:{approval}",
        target="invoice:{invoice}",
        amount_minor="amount_minor",
        currency="currency",
        provider="demo-payments",
        external_ref=lambda answer: str(answer["id"]),
    )
    def refund(invoice: str, approval: str, amount_minor: int, currency: str, fault: str = "") -> dict[str, Any]:
        body = {"kind": "refund", "amount_minor": amount_minor, "currency": currency, "target": f"invoice:{invoice}"}
        headers = {"Content-Type": "application/json", "Idempotency-Key": f"refund:{invoice}:{approval}"}
        if fault:
            headers["X-Fake-Fault"] = fault  # the demo provider's way to misbehave on request
        request = urllib.request.Request(
            f"{provider_url}/v1/effects", data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as error:
            if error.code == 429:
                raise RateLimited(float(error.headers.get("Retry-After", "60"))) from error
            raise ProviderError(error.code) from error

    run = uuid.uuid4().hex[:6].upper()
    for n, amount in enumerate([1500, 2750, 990], start=1):
        invoice = f"PY-{run}-{n}"
        for attempt in ("first", "again"):
            answer = refund(invoice, "AP-1", amount, "EUR")
            print(f"{invoice} ({attempt}): refunded as {answer['id']}")

    # Caused on purpose: the provider makes the refund, then drops the
    # connection. The outcome is unknown, never failed: asking again does
    # not refund twice, it says the refund is being checked.
    invoice = f"PY-{run}-LOST"
    try:
        refund(invoice, "AP-1", 4200, "EUR", fault="apply-then-reset")
    except ConnectionError as error:
        print(f"{invoice}: reply lost ({type(error).__name__}): recorded unknown")
    try:
        refund(invoice, "AP-1", 4200, "EUR", fault="apply-then-reset")
    except EffectError as error:
        print(f"{invoice} (again): {error}")
    print("Open the console's unknown pane (or `effectwatch list unknown`) to see it.")


if __name__ == "__main__":
    main()
