"""The shared scenario file (clients/scenarios.json, see SCENARIOS.md) run
through this client's low-level calls, sync and asyncio, with every decision
the file produces mapped to the exception its wrappers raise; and its keys
made as this client's decorator makes them."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import psycopg
import pytest
from psycopg.rows import dict_row

from effectwatch import AsyncLedger, BadArgument, Intent, Ledger
from effectwatch._core import refusal_for
from effectwatch._keys import Terms, ToolKeys

SCENARIOS = json.loads((Path(__file__).parents[2] / "scenarios.json").read_text())

EXCEPTION_OF = {
    "refused": "NotYours",
    "in_flight": "InFlight",
    "held": "Held",
    "rejected": "Rejected",
    "stop": "Stop",
    "overlap": "Overlap",
    "wait": "Wait",
}


class Divergence(AssertionError):
    pass


def same(where: str, field: str, expected: Any, got: Any) -> None:
    if expected != got:
        raise Divergence(f"{where}: {field}: expected {expected!r}, got {got!r}")


def check_fields(where: str, expect: dict[str, Any], got: dict[str, Any], fields: tuple[str, ...]) -> None:
    for field in fields:
        if field in expect:
            same(where, field, expect[field], got[field])


class Runner:
    """Runs the file once with one prefix on every key and target."""

    def __init__(self, database_url: str, prefix: str, call: Callable[[str, Any], Awaitable[Any]]) -> None:
        self.database_url = database_url
        self.prefix = prefix
        self.call = call

    def sql(self, query: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        with psycopg.connect(self.database_url, autocommit=True, row_factory=dict_row) as connection:
            return connection.execute(query, args).fetchall()

    def mine(self, args: dict[str, Any]) -> dict[str, Any]:
        args = dict(args)
        for field in ("op_key", "target"):
            if field in args:
                args[field] = self.prefix + args[field]
        if "op_keys" in args:
            args["op_keys"] = [self.prefix + key for key in args["op_keys"]]
        return args

    async def run(self) -> int:
        operator = SCENARIOS["operator"]
        steps = 0
        for scenario in SCENARIOS["scenarios"]:
            for index, step in enumerate(scenario["steps"]):
                where = f"scenario {scenario['name']!r}, step {index}"
                expect = step.get("expect", {})
                verb = next(key for key in step if key not in ("expect", "about"))
                args = self.mine(step[verb])
                await self.step(where, verb, args, expect, operator)
                steps += 1
        return steps

    async def step(self, where: str, verb: str, args: dict[str, Any], expect: dict[str, Any], operator: str) -> None:
        if verb == "begin":
            intent = Intent(
                args["op_key"], args["action"], args["target"], args["params"],
                args.get("amount_minor"), args.get("currency"),
            )
            begun = await self.call("begin", intent)
            same(where, "decision", expect.get("decision", begun.decision), begun.decision)
            same(where, "state", expect.get("state", begun.state), begun.state)
            if "result" in expect:
                same(where, "result", expect["result"], begun.result)
            if "retry_after_seconds" in expect:
                seconds = begun.result["retry_after_seconds"]
                bounds = expect["retry_after_seconds"]
                if not bounds["at_least"] <= seconds <= bounds["at_most"]:
                    raise Divergence(f"{where}: retry_after_seconds {seconds} not in {bounds}")
            if begun.decision in EXCEPTION_OF:
                raised = refusal_for(begun, intent)
                same(where, "exception", EXCEPTION_OF[begun.decision], type(raised).__name__)
                assert intent.op_key in str(raised)
        elif verb == "dispatch":
            dispatch = await self.call("dispatch", args)
            check_fields(where, expect, vars(dispatch), ("claimed", "state"))
        elif verb == "complete":
            fields: dict[str, Any] = {
                name: args[name]
                for name in ("external_ref", "result", "retryable", "reason", "error_class")
                if name in args
            }
            if "retry_after_seconds" in args:
                fields["retry_after"] = args["retry_after_seconds"]
            try:
                completed = await self.call("complete", (args["op_key"], args["target"], args["outcome"], fields))
            except psycopg.Error as error:
                if "error_sqlstate" not in expect:
                    raise Divergence(f"{where}: complete_effect failed: {error}") from error
                same(where, "error_sqlstate", expect["error_sqlstate"], error.sqlstate)
                return
            if "error_sqlstate" in expect:
                raise Divergence(f"{where}: expected SQLSTATE {expect['error_sqlstate']}, got {completed}")
            check_fields(where, expect, vars(completed), ("applied", "state", "late"))
        elif verb == "set_policy":
            self.sql(
                "select * from ledger.op_set_policy(action => %(action)s, operator => %(operator)s,"
                " reason => 'scenario', retry_semantics => %(retry_semantics)s,"
                " exclusive_per_target => %(exclusive)s,"
                " pending_window => make_interval(secs => %(window)s::float8))",
                {"action": args["action"], "operator": operator, "retry_semantics": args.get("retry_semantics"),
                 "exclusive": args.get("exclusive_per_target"), "window": args.get("pending_window_secs")},
            )
        elif verb == "resolve":
            rows = self.sql(
                "select r.state from ledger.op_resolve(op_key => %(op_key)s,"
                " expected_version => (select version from ledger.effects where op_key = %(op_key)s),"
                " operator => %(operator)s, reason => %(reason)s, outcome => %(outcome)s,"
                " external_ref => %(external_ref)s) r",
                {**args, "operator": operator},
            )
            check_fields(where, expect, rows[0], ("state",))
        elif verb == "prune":
            rows = self.sql(
                "select p.effects from ledger.prune_settled(older_than => interval '0', operator => %(operator)s,"
                " reason => 'scenario', only_ids => (select array_agg(id) from ledger.effects"
                " where op_key = any(%(keys)s))) p",
                {"operator": operator, "keys": args["op_keys"]},
            )
            check_fields(where, expect, rows[0], ("effects",))
        elif verb == "check":
            self.check(where, args["op_key"], expect)
        elif verb == "crash":
            pass
        elif verb == "sleep":
            await asyncio.sleep(args["seconds"])
        else:
            raise Divergence(f"{where}: no verb named {verb}")

    def check(self, where: str, op_key: str, expect: dict[str, Any]) -> None:
        rows = self.sql(
            "select state, external_ref, error_class, retryable, attention,"
            " late_result_at is not null as late_result, dispatched_at is not null as dispatched,"
            " exists (select 1 from ledger.unknown_outcomes u where u.op_key = e.op_key) as in_unknown_pane"
            " from ledger.effects e where op_key = %(k)s",
            {"k": op_key},
        )
        if "pruned" in expect:
            tombstones = self.sql("select 1 from ledger.key_tombstones where op_key = %(k)s", {"k": op_key})
            same(where, "pruned", expect["pruned"], not rows and bool(tombstones))
        for field, value in expect.items():
            if field in ("pruned", "attempts"):
                continue
            if not rows:
                raise Divergence(f"{where}: no effect {op_key}")
            if field not in rows[0]:
                raise Divergence(f"{where}: check knows no field {field}")
            same(where, field, value, rows[0][field])
        for kind, count in expect.get("attempts", {}).items():
            got = self.sql(
                "select count(*) as n from ledger.attempts where op_key = %(k)s and kind = %(kind)s",
                {"k": op_key, "kind": kind},
            )[0]["n"]
            same(where, f"attempts of kind {kind}", count, got)


def sync_calls(ledger: Ledger) -> Callable[[str, Any], Awaitable[Any]]:
    async def call(what: str, args: Any) -> Any:
        if what == "begin":
            return ledger.begin(args)
        if what == "dispatch":
            return ledger.mark_dispatched(args["op_key"], target=args["target"])
        op_key, target, outcome, fields = args
        return ledger.complete(op_key, target=target, outcome=outcome, **fields)

    return call


def async_calls(ledger: AsyncLedger) -> Callable[[str, Any], Awaitable[Any]]:
    async def call(what: str, args: Any) -> Any:
        if what == "begin":
            return await ledger.begin(args)
        if what == "dispatch":
            return await ledger.mark_dispatched(args["op_key"], target=args["target"])
        op_key, target, outcome, fields = args
        return await ledger.complete(op_key, target=target, outcome=outcome, **fields)

    return call


def test_the_sync_client_passes_every_scenario(database_url: str, unique: str) -> None:
    ledger = Ledger(database_url, requested_by=SCENARIOS["requested_by"])
    steps = asyncio.run(Runner(database_url, f"sync-{unique}-", sync_calls(ledger)).run())
    assert steps > len(SCENARIOS["scenarios"])


async def test_the_asyncio_client_passes_every_scenario(database_url: str, unique: str) -> None:
    ledger = AsyncLedger(database_url, requested_by=SCENARIOS["requested_by"])
    steps = await Runner(database_url, f"async-{unique}-", async_calls(ledger)).run()
    assert steps > len(SCENARIOS["scenarios"])


def terms_of(where: str, case: dict[str, Any], call: dict[str, Any]) -> Terms:
    """A call's key and params as the decorator makes them, for a tool
    taking every argument the case's calls name; the template is its target
    too."""
    takes = {name for each in case["calls"] for name in each}
    tool = ToolKeys(
        f"the tool of {where}",
        sorted(takes),
        op_key=case["template"],
        target=case["template"],
        normalise=case.get("normalise"),
        amount_minor=case.get("money"),
    )
    return tool.terms(call)


def check_keys_case(case: dict[str, Any]) -> None:
    expect = case["expect"]
    keys: list[str] = []
    for index, call in enumerate(case["calls"]):
        where = f"keys case {case['name']!r}, call {index}"
        try:
            terms = terms_of(where, case, call)
        except BadArgument as refused:
            if "refused" not in expect:
                raise Divergence(f"{where}: refused: {refused}") from refused
            same(where, "refused argument", expect["refused"], refused.argument)
            continue
        if "refused" in expect:
            raise Divergence(f"{where}: expected {expect['refused']} refused, got the key {terms.op_key!r}")
        if "key" in expect:
            same(where, "key", expect["key"], terms.op_key)
        if "params" in expect:
            # Type for type: json.dumps writes 1500.0 and 1500 apart.
            same(where, "params", json.dumps(expect["params"], sort_keys=True), json.dumps(terms.params, sort_keys=True))
        if expect.get("distinct") and terms.op_key in keys:
            raise Divergence(f"{where}: key {terms.op_key!r} repeats call {keys.index(terms.op_key)}'s")
        keys.append(terms.op_key)


def test_the_client_makes_every_key_of_the_file() -> None:
    cases = SCENARIOS["keys"]["cases"]
    for case in cases:
        check_keys_case(case)
    assert len(cases) > 1
