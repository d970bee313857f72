// The client through a real PgBouncer in transaction mode (started by the
// one test command where the package is installed): a server connection is
// the client's for one transaction only, so a statement prepared on one is
// missing, or already there, on the next.

import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { Ledger } from "../src/index.js";
import { databaseUrl, historyOf, leaseBeats, unique } from "./support.js";

const bouncerUrl = process.env["EFFECTWATCH_TEST_PGBOUNCER_URL"];
const skip = bouncerUrl ? false : "PgBouncer is not installed";
const CALLS = 500;
const CALLERS = 8;
// More client connections than PgBouncer's server pool (8), so that a
// client's next statement lands on a server connection it did not prepare.
const NAMED_CALLERS = 32;

async function inParallel(count: number, callers: number, call: (index: number) => Promise<void>): Promise<unknown[]> {
  const errors: unknown[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (next < count) {
        const index = next++;
        await call(index).catch((error: unknown) => errors.push(error));
      }
    }),
  );
  return errors;
}

test(`${CALLS} effects through PgBouncer in transaction mode: no error`, { skip }, async (t) => {
  const started = Date.now();
  const ledger = new Ledger({ connectionString: bouncerUrl!, requestedBy: "agent-ts-bouncer",
    maxConnections: CALLERS,
    statementTimeoutMs: null,
  });
  const run = unique();
  try {
    const errors = await inParallel(CALLS, CALLERS, async (index) => {
      const opKey = `refund:BNC-${run}-${index}`;
      const intent = { opKey, action: "refund", target: `invoice:BNC-${run}-${index}`, params: { amount_minor: index } };
      await ledger.effect(intent, async (e) => {
        await e.dispatched();
        return e.succeeded(`re_${index}`, { index });
      });
      assert.deepEqual(await ledger.effect(intent, async () => assert.fail("replayed")), { index });
    });
    assert.deepEqual(errors.map(String), []);
    t.diagnostic(`${CALLS} effects (begin, dispatch, complete, replay) by ${CALLERS} callers: 0 errors in ${Date.now() - started} ms`);
  } finally {
    await ledger.close();
  }
});

test("a slow call through PgBouncer keeps beating: succeeded, never unknown", { skip }, async () => {
  const ledger = new Ledger({ connectionString: bouncerUrl!, requestedBy: "agent-ts-bouncer",
    statementTimeoutMs: null,
    heartbeatLeaseMs: 1000,
  });
  const opKey = `refund:BNC-HB-${unique()}`;
  const beats: (number | null)[] = [];
  try {
    await ledger.effect({ opKey, action: "refund", target: `invoice:${opKey}`, params: { amount_minor: 1 } }, async (e) => {
      await e.dispatched();
      // Two leases' length.
      await sleep(2_300);
      beats.push(await leaseBeats(opKey));
      return e.succeeded("re_hb", { ok: true });
    });
    const states = (await historyOf(opKey)).map((version) => version.state);
    assert.equal(states.at(-1), "succeeded", states.join(" → "));
    assert.ok(!states.includes("unknown"), states.join(" → "));
    // The claim's, then one every third of the lease: never fewer than the
    // two without which the lease would run out.
    assert.ok(beats[0] !== null && beats[0] !== undefined && beats[0] >= 3, `beats: ${beats[0]}`);
  } finally {
    await ledger.close();
  }
});

test("the same calls as named, prepared queries fail through PgBouncer: why the client never names one", { skip }, async (t) => {
  const pool = new pg.Pool({ connectionString: bouncerUrl!, max: NAMED_CALLERS });
  const run = unique();
  try {
    const errors = await inParallel(CALLS, NAMED_CALLERS, async (index) => {
      await pool.query({
        name: "begin_effect",
        text: `select decision from ledger.begin_effect(op_key => $1, action => 'refund', target => $2,
                 params => '{}'::jsonb, requested_by => 'agent-ts-bouncer')`,
        values: [`refund:NAMED-${run}-${index}`, `invoice:NAMED-${run}-${index}`],
      });
    });
    t.diagnostic(`${CALLS} named begin_effect calls by ${NAMED_CALLERS} callers: ${errors.length} errors`);
    assert.ok(errors.length > 0, "prepared statements went through PgBouncer without an error");
    const codes = new Set(errors.map((error) => (error as { code?: string }).code));
    assert.ok(codes.has("26000") || codes.has("42P05"), `errors: ${[...codes].join(", ")}`);
  } finally {
    await pool.end();
  }
});

test("a pool of the caller's through PgBouncer: each call's statement timeout set in its own transaction", { skip }, async (t) => {
  const pool = new pg.Pool({ connectionString: bouncerUrl!, max: CALLERS });
  pool.on("error", () => {});
  // The default 10 s, set in each call's transaction: `set local` is what
  // PgBouncer's transaction mode takes where a startup parameter is refused.
  const ledger = new Ledger({ pool, requestedBy: "agent-ts-bouncer" });
  const bounded = new Ledger({ pool, requestedBy: "agent-ts-bouncer", statementTimeoutMs: 300 });
  const run = unique();
  const holder = new pg.Client({ connectionString: databaseUrl() });
  try {
    const count = 200;
    const errors = await inParallel(count, CALLERS, async (index) => {
      const opKey = `refund:BNCP-${run}-${index}`;
      await ledger.effect({ opKey, action: "refund", target: `invoice:BNCP-${run}-${index}`, params: { amount_minor: index } }, async (e) => {
        await e.dispatched();
        return e.succeeded(`re_${index}`, { index });
      });
    });
    assert.deepEqual(errors.map(String), []);
    // The timeout reaches the server through the pooler: a begin kept
    // waiting on the effect's row is cancelled after it.
    const intent = { opKey: `refund:BNCT-${run}`, action: "refund", target: `invoice:BNCT-${run}`, params: { amount_minor: 1 } };
    assert.equal((await bounded.begin(intent)).decision, "proceed");
    await holder.connect();
    await holder.query("begin");
    await holder.query("select 1 from ledger.effects where op_key = $1 for update", [intent.opKey]);
    const started = performance.now();
    await assert.rejects(bounded.begin(intent), (error: { code?: string }) => error.code === "57014");
    const took = performance.now() - started;
    assert.ok(took < 3_000, `cancelled after ${took} ms`);
    t.diagnostic(`a pool of the caller's through PgBouncer: ${count} effects, 0 errors; a 300 ms timeout cancelled a held begin in ${Math.round(took)} ms`);
  } finally {
    await holder.end().catch(() => {});
    await ledger.close();
    await pool.end();
  }
});
