// The shared scenario file (clients/scenarios.json, see SCENARIOS.md) run
// through this client's low-level calls, with every decision the file
// produces mapped to the error its wrappers throw; and its keys made as the
// wrapper makes them.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { DatabaseError } from "pg";
import {
  ArgumentRules,
  BadArgument,
  KeyTemplate,
  Ledger,
  canonicalParams,
  refusalFor,
  type Intent,
  type Normalise,
} from "../src/index.js";
import { databaseUrl, sql, unique } from "./support.js";

type Args = Record<string, any>;
interface Step {
  expect?: Args;
  [verb: string]: Args | undefined;
}
interface KeyCase {
  name: string;
  template: string;
  money?: string;
  normalise?: Normalise;
  calls: Args[];
  expect: { key?: string; params?: Args; distinct?: boolean; refused?: string };
}
interface Scenarios {
  requested_by: string;
  operator: string;
  keys: { cases: KeyCase[] };
  scenarios: { name: string; steps: Step[] }[];
}

const SCENARIOS = JSON.parse(readFileSync(new URL("../../../scenarios.json", import.meta.url), "utf8")) as Scenarios;

const ERROR_OF: Record<string, string> = {
  refused: "NotYours",
  in_flight: "InFlight",
  held: "Held",
  rejected: "Rejected",
  stop: "Stop",
  overlap: "Overlap",
  wait: "Wait",
};

class Divergence extends Error {}

function same(where: string, field: string, expected: unknown, got: unknown): void {
  if (JSON.stringify(expected) !== JSON.stringify(canonical(got))) {
    throw new Divergence(`${where}: ${field}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(got)}`);
  }
}

// Objects compared as JSON, whatever order their keys came back in.
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((key) => [key, canonical((value as Args)[key])]));
  }
  return value;
}

function sameJson(where: string, field: string, expected: unknown, got: unknown): void {
  same(where, field, canonical(expected), got);
}

function checkFields(where: string, expect: Args, got: Args, fields: string[]): void {
  for (const field of fields) if (field in expect) same(where, field, expect[field], got[field]);
}

class Runner {
  constructor(
    private readonly ledger: Ledger,
    private readonly prefix: string,
  ) {}

  mine(args: Args): Args {
    const out = { ...args };
    for (const field of ["op_key", "target"]) if (field in out) out[field] = this.prefix + out[field];
    if ("op_keys" in out) out["op_keys"] = (out["op_keys"] as string[]).map((key) => this.prefix + key);
    return out;
  }

  async run(): Promise<number> {
    let steps = 0;
    for (const scenario of SCENARIOS.scenarios) {
      for (const [index, step] of scenario.steps.entries()) {
        const where = `scenario ${scenario.name}, step ${index}`;
        const verb = Object.keys(step).find((key) => key !== "expect" && key !== "about");
        if (!verb) throw new Divergence(`${where}: no verb`);
        await this.step(where, verb, this.mine(step[verb] ?? {}), step.expect ?? {});
        steps++;
      }
    }
    return steps;
  }

  async step(where: string, verb: string, args: Args, expect: Args): Promise<void> {
    const operator = SCENARIOS.operator;
    switch (verb) {
      case "begin": {
        const intent: Intent = {
          opKey: args["op_key"],
          action: args["action"],
          target: args["target"],
          params: args["params"],
          amountMinor: args["amount_minor"] ?? null,
          currency: args["currency"] ?? null,
        };
        const begun = await this.ledger.begin(intent);
        same(where, "decision", expect["decision"] ?? begun.decision, begun.decision);
        same(where, "state", expect["state"] ?? begun.state, begun.state);
        if ("result" in expect) sameJson(where, "result", expect["result"], begun.result);
        if ("retry_after_seconds" in expect) {
          const seconds = (begun.result as Args)["retry_after_seconds"] as number;
          const bounds = expect["retry_after_seconds"] as { at_least: number; at_most: number };
          if (!(bounds.at_least <= seconds && seconds <= bounds.at_most)) {
            throw new Divergence(`${where}: retry_after_seconds ${seconds} not in ${JSON.stringify(bounds)}`);
          }
        }
        const errorName = ERROR_OF[begun.decision];
        if (errorName !== undefined) {
          const thrown = await this.ledger.refusalFor(begun, intent);
          same(where, "error", errorName, thrown.name);
          assert.ok(thrown.message.includes(intent.opKey), `${where}: the message names the key`);
          if (begun.decision === "wait") assert.ok("retryAfter" in thrown, `${where}: Wait carries retryAfter`);
        } else {
          assert.throws(() => refusalFor(begun, intent), /does not know/, `${where}: ${begun.decision} raises nothing`);
        }
        return;
      }
      case "dispatch": {
        const dispatch = await this.ledger.markDispatched(args["op_key"], args["target"]);
        checkFields(where, expect, dispatch, ["claimed", "state"]);
        return;
      }
      case "complete": {
        try {
          const completed = await this.ledger.complete(args["op_key"], args["target"], args["outcome"], {
            externalRef: args["external_ref"],
            result: args["result"],
            retryable: args["retryable"],
            reason: args["reason"],
            errorClass: args["error_class"],
            retryAfter: args["retry_after_seconds"],
          });
          if ("error_sqlstate" in expect) {
            throw new Divergence(`${where}: expected SQLSTATE ${expect["error_sqlstate"]}, got ${JSON.stringify(completed)}`);
          }
          checkFields(where, expect, completed, ["applied", "state", "late"]);
        } catch (error) {
          if (!(error instanceof DatabaseError)) throw error;
          if (!("error_sqlstate" in expect)) throw new Divergence(`${where}: complete_effect failed: ${error.message}`);
          same(where, "error_sqlstate", expect["error_sqlstate"], error.code);
        }
        return;
      }
      case "set_policy":
        await sql(
          `select * from ledger.op_set_policy(action => $1, operator => $2, reason => 'scenario',
             retry_semantics => $3, exclusive_per_target => $4,
             pending_window => make_interval(secs => $5::float8))`,
          [
            args["action"],
            operator,
            args["retry_semantics"] ?? null,
            args["exclusive_per_target"] ?? null,
            args["pending_window_secs"] ?? null,
          ],
        );
        return;
      case "resolve": {
        const rows = await sql<{ state: string }>(
          `select r.state from ledger.op_resolve(op_key => $1,
             expected_version => (select version from ledger.effects where op_key = $1),
             operator => $2, reason => $3, outcome => $4, external_ref => $5) r`,
          [args["op_key"], operator, args["reason"], args["outcome"], args["external_ref"] ?? null],
        );
        checkFields(where, expect, rows[0] ?? {}, ["state"]);
        return;
      }
      case "prune": {
        const rows = await sql<{ effects: number }>(
          `select p.effects::int as effects from ledger.prune_settled(older_than => interval '0', operator => $1,
             reason => 'scenario', only_ids => (select array_agg(id) from ledger.effects where op_key = any($2))) p`,
          [operator, args["op_keys"]],
        );
        checkFields(where, expect, rows[0] ?? {}, ["effects"]);
        return;
      }
      case "check":
        await this.check(where, args["op_key"], expect);
        return;
      case "crash":
        return;
      case "sleep":
        await new Promise((resolve) => setTimeout(resolve, (args["seconds"] as number) * 1000));
        return;
      default:
        throw new Divergence(`${where}: no verb named ${verb}`);
    }
  }

  async check(where: string, opKey: string, expect: Args): Promise<void> {
    const rows = await sql<Args>(
      `select state, external_ref, error_class, retryable, attention,
              late_result_at is not null as late_result, dispatched_at is not null as dispatched,
              exists (select 1 from ledger.unknown_outcomes u where u.op_key = e.op_key) as in_unknown_pane
         from ledger.effects e where op_key = $1`,
      [opKey],
    );
    if ("pruned" in expect) {
      const tombstones = await sql("select 1 from ledger.key_tombstones where op_key = $1", [opKey]);
      same(where, "pruned", expect["pruned"], rows.length === 0 && tombstones.length > 0);
    }
    for (const [field, value] of Object.entries(expect)) {
      if (field === "pruned" || field === "attempts") continue;
      const row = rows[0];
      if (row === undefined) throw new Divergence(`${where}: no effect ${opKey}`);
      if (!(field in row)) throw new Divergence(`${where}: check knows no field ${field}`);
      same(where, field, value, row[field]);
    }
    for (const [kind, count] of Object.entries((expect["attempts"] ?? {}) as Record<string, number>)) {
      const [row] = await sql<{ n: number }>("select count(*)::int as n from ledger.attempts where op_key = $1 and kind = $2", [opKey, kind]);
      same(where, `attempts of kind ${kind}`, count, row?.n);
    }
  }
}

// What the wrapper does with a call before the ledger sees it: its
// canonical arguments, the key filled from them, and the params as stored.
function madeKey(keyCase: KeyCase): (call: Args) => { key: string; params: string } {
  const rules = new ArgumentRules(keyCase.normalise, keyCase.money ?? null);
  const template = KeyTemplate.parse("opKey", keyCase.template);
  return (call) => {
    const canonical = rules.canonical(call);
    return { key: template.fill(canonical), params: canonicalParams(canonical) };
  };
}

function checkKeyCase(keyCase: KeyCase): void {
  const make = madeKey(keyCase);
  const { expect } = keyCase;
  const keys = new Map<string, number>();
  for (const [index, call] of keyCase.calls.entries()) {
    const where = `keys case ${JSON.stringify(keyCase.name)}, call ${index}`;
    let made: { key: string; params: string };
    try {
      made = make(call);
    } catch (error) {
      if (expect.refused === undefined) throw new Divergence(`${where}: refused: ${String(error)}`);
      if (!(error instanceof BadArgument)) throw new Divergence(`${where}: refused with ${String(error)}, not BadArgument`);
      same(where, "refused argument", expect.refused, error.argument);
      continue;
    }
    if (expect.refused !== undefined) throw new Divergence(`${where}: expected ${expect.refused} refused, got the key ${made.key}`);
    if (expect.key !== undefined) same(where, "key", expect.key, made.key);
    if (expect.params !== undefined) same(where, "params", canonicalParams(expect.params), made.params);
    if (expect.distinct) {
      const earlier = keys.get(made.key);
      if (earlier !== undefined) throw new Divergence(`${where}: the key ${made.key} of call ${earlier} again`);
      keys.set(made.key, index);
    }
  }
}

test("the client makes every key of the shared file as its wrapper does", () => {
  for (const keyCase of SCENARIOS.keys.cases) checkKeyCase(keyCase);
  assert.ok(SCENARIOS.keys.cases.length > 0, "the file's keys were read");
});

test("the client passes every scenario of the shared file", async () => {
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: SCENARIOS.requested_by });
  try {
    const steps = await new Runner(ledger, `ts-${unique()}-`).run();
    assert.ok(steps > SCENARIOS.scenarios.length, "the file was read and its steps run");
  } finally {
    await ledger.close();
  }
});
