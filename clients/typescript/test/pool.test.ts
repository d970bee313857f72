// A Ledger on a pg.Pool of the caller's (LedgerOptions.pool): used as it
// is — a connection taken for each statement and given back, the pool
// never ended by the ledger — with the statement timeout (10 s unless told)
// set in each call's own transaction (`set local`), as the Python client
// does on a pool passed to it.

import { test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { Ledger, type Intent } from "../src/index.js";
import { databaseUrl, unique } from "./support.js";

/** What the ledger sends its statements through. */
function statements(ledger: Ledger): { query<Row extends pg.QueryResultRow>(sql: string, values: unknown[]): Promise<pg.QueryResult<Row>> } {
  return (ledger as unknown as { pool: ReturnType<typeof statements> }).pool;
}

function poolOf(max: number): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl(), max });
  // The caller's part: an idle connection the server ends must not end the process.
  pool.on("error", () => {});
  return pool;
}

function intentFor(opKey: string): Intent {
  return { opKey, action: "refund", target: `invoice:${opKey}`, params: { amount_minor: 1 } };
}

test("a Ledger is made on a connectionString or on a pool, and a pool's settings are its own", async () => {
  const pool = poolOf(1);
  try {
    assert.throws(() => new Ledger({ requestedBy: "agent-ts-pool" }), /one of the two/);
    assert.throws(() => new Ledger({ connectionString: databaseUrl(), pool, requestedBy: "agent-ts-pool" }), /one of the two/);
    assert.throws(() => new Ledger({ pool, requestedBy: "agent-ts-pool", applicationName: "mine" }), /set them on the pool you pass/);
    assert.throws(() => new Ledger({ pool, requestedBy: "agent-ts-pool", maxConnections: 2 }), /set them on the pool you pass/);
    for (const wrong of [-1, 1.5, Number.NaN]) {
      assert.throws(() => new Ledger({ pool, requestedBy: "agent-ts-pool", statementTimeoutMs: wrong }), RangeError);
    }
  } finally {
    await pool.end();
  }
});

test("effects on a pool of the caller's take its connections, give them back, and leave it open", async () => {
  const pool = poolOf(2);
  let made = 0;
  pool.on("connect", () => (made += 1));
  const ledger = new Ledger({ pool, requestedBy: "agent-ts-pool" });
  const run = unique();
  try {
    for (let n = 0; n < 5; n++) {
      const intent = intentFor(`refund:POOL-${run}-${n}`);
      const answer = await ledger.effect(intent, async (e) => {
        await e.dispatched();
        return e.succeeded(`re_${n}`, { n });
      });
      assert.deepEqual(answer, { n });
      assert.deepEqual(await ledger.effect(intent, async () => assert.fail("replayed")), { n });
    }
    assert.ok(made >= 1 && made <= 2, `the pool made ${made} connections`);
    assert.equal(pool.idleCount, pool.totalCount, "every connection given back");
    await ledger.close();
    assert.equal((await pool.query<{ open: number }>("select 1 as open")).rows[0]?.open, 1, "the pool is still open");
  } finally {
    await pool.end();
  }
});

test("on a pool of the caller's, the statement timeout is set in each call's transaction: 10 s unless told", async () => {
  const pool = poolOf(1);
  try {
    const own = (await pool.query<{ statement_timeout: string }>("show statement_timeout")).rows[0]?.statement_timeout;
    const setting = async (ledger: Ledger): Promise<string | undefined> =>
      (await statements(ledger).query<{ timeout: string }>("select current_setting('statement_timeout') as timeout", [])).rows[0]?.timeout;
    assert.equal(await setting(new Ledger({ pool, requestedBy: "agent-ts-pool" })), "10s");
    assert.equal(await setting(new Ledger({ pool, requestedBy: "agent-ts-pool", statementTimeoutMs: 300 })), "300ms");
    // null: the pool's connections as they are, one statement a call.
    assert.equal(await setting(new Ledger({ pool, requestedBy: "agent-ts-pool", statementTimeoutMs: null })), own);
    // `set local`: the connection keeps its own timeout, and no transaction open.
    assert.equal((await pool.query<{ statement_timeout: string }>("show statement_timeout")).rows[0]?.statement_timeout, own);
    assert.equal(pool.idleCount, pool.totalCount);
  } finally {
    await pool.end();
  }
});

test("on a pool of the caller's, a begin kept waiting past the timeout is cancelled and not sent again", async () => {
  const pool = poolOf(2);
  const ledger = new Ledger({ pool, requestedBy: "agent-ts-pool", statementTimeoutMs: 300 });
  const intent = intentFor(`refund:PTO-${unique()}`);
  const holder = new pg.Client({ connectionString: databaseUrl() });
  await holder.connect();
  try {
    assert.equal((await ledger.begin(intent)).decision, "proceed");
    await holder.query("begin");
    await holder.query("select 1 from ledger.effects where op_key = $1 for update", [intent.opKey]);
    const started = performance.now();
    await assert.rejects(ledger.begin(intent), (error: { code?: string }) => error.code === "57014");
    const took = performance.now() - started;
    assert.ok(took > 250 && took < 3_000, `cancelled after ${took} ms`);
    await holder.query("rollback");
    // The cancelled call's transaction was rolled back and its connection given back, usable.
    assert.equal(pool.idleCount, pool.totalCount);
    assert.equal((await ledger.begin(intent)).decision, "in_flight");
  } finally {
    await holder.end();
    await pool.end();
  }
});

test("on a pool of the caller's, a call whose connection the server ended goes on, on another", async () => {
  const pool = poolOf(1);
  const ledger = new Ledger({ pool, requestedBy: "agent-ts-pool" });
  const run = unique();
  try {
    const first = intentFor(`refund:PEND-${run}-1`);
    await ledger.effect(first, async (e) => {
      await e.dispatched();
      return e.succeeded("re_1", { n: 1 });
    });
    // The pool's one connection, ended by the server.
    const [{ pid } = { pid: 0 }] = (await pool.query<{ pid: number }>("select pg_backend_pid() as pid")).rows;
    const admin = new pg.Client({ connectionString: databaseUrl() });
    await admin.connect();
    try {
      await admin.query("select pg_terminate_backend($1)", [pid]);
    } finally {
      await admin.end();
    }
    const second = intentFor(`refund:PEND-${run}-2`);
    const answer = await ledger.effect(second, async (e) => {
      await e.dispatched();
      return e.succeeded("re_2", { n: 2 });
    });
    assert.deepEqual(answer, { n: 2 });
    const [{ other } = { other: 0 }] = (await pool.query<{ other: number }>("select pg_backend_pid() as other")).rows;
    assert.notEqual(other, pid);
  } finally {
    await pool.end();
  }
});
