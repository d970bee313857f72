// Heartbeats: a provider call's claim starts its lease, and while the call
// runs the client beats for it, a third of a lease after the claim and every
// third of a lease from then, so that a worker that dies mid-call is unknown
// (worker_lost) within its lease rather than at the end of its pending
// window, a slow call that keeps beating is never taken for a dead one, and
// a call that answers sooner costs no statement at all.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { Ledger } from "../src/index.js";
import { FakeProvider, databaseUrl, historyOf, leaseBeats, sql, unique } from "./support.js";

const LEASE_MS = 1000;
const provider = new FakeProvider();

before(async () => {
  await provider.start();
});

after(async () => {
  await provider.stop();
});

/** What `probe` finds, once it finds something; fails after `withinMs`. */
async function until<T>(what: string, probe: () => Promise<T | null | undefined>, withinMs = 5_000): Promise<T> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const found = await probe();
    if (found !== null && found !== undefined) return found;
    if (Date.now() > deadline) assert.fail(`${what}: not within ${withinMs} ms`);
    await sleep(20);
  }
}

/**
 * The statements `ledger` sends from now on, each named by the ledger
 * function it calls; `lose` makes the first few of one kind lose their
 * connection, as in a PgBouncer restart; `leases` gets the lease each beat
 * asks for, in ms.
 */
function statementsOf(ledger: Ledger, lose: { heartbeat?: number } = {}, leases: number[] = []): string[] {
  const pool = (ledger as unknown as { pool: pg.Pool }).pool;
  const seam = pool as unknown as { query: (text: string, values?: unknown[]) => Promise<pg.QueryResult> };
  const query = seam.query.bind(pool);
  const sent: string[] = [];
  let lost = lose.heartbeat ?? 0;
  seam.query = async (text, values) => {
    const called = /ledger\.(\w+)\(/.exec(text)?.[1] ?? text;
    sent.push(called);
    if (called === "heartbeat") leases.push(Number(values?.[1]) * 1000);
    if (called === "heartbeat" && lost-- > 0) throw new Error("Connection terminated unexpectedly");
    return query(text, values);
  };
  return sent;
}

/** Resolves when the worker says its provider call has started. */
function started(worker: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    let said = "";
    worker.stdout!.on("data", (chunk: Buffer) => {
      said += chunk.toString();
      if (said.includes("started\n")) resolve();
    });
    worker.once("exit", (code, signal) => reject(new Error(`the worker ended (${code ?? signal}) before its call started: ${said}`)));
  });
}

function intentFor(opKey: string) {
  return { opKey, action: "refund", target: `invoice:${opKey}`, params: { amount_minor: 300 } };
}

test("a worker SIGKILLed mid-call is unknown (worker_lost) within its lease", async (t) => {
  const opKey = `refund:HB-KILL-${unique()}`;
  const script = new URL("./worker.js", import.meta.url).pathname;
  const worker = spawn(process.execPath, [script, opKey, String(LEASE_MS)], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    // Killed as soon as its provider call starts: the claim started the
    // lease, no beat need have landed.
    await started(worker);
    worker.kill("SIGKILL");
    const killed = Date.now();
    assert.notEqual(await leaseBeats(opKey), null, "the claim started a lease");
    const lastError = await until(
      "the effect in the unknown pane",
      async () =>
        (await sql<{ last_error: string }>("select last_error from ledger.unknown_outcomes_at(null) where op_key = $1", [opKey]))[0]
          ?.last_error,
      LEASE_MS + 5_000,
    );
    const took = Date.now() - killed;
    t.diagnostic(`SIGKILL to unknown (worker_lost): ${took} ms, with a lease of ${LEASE_MS} ms`);
    assert.match(lastError, /^worker_lost/);
    assert.ok(took < LEASE_MS + 2_000, `took ${took} ms`);
  } finally {
    worker.kill("SIGKILL");
  }
});

test("a slow call of three leases keeps beating: succeeded, never unknown", async () => {
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-heartbeats", heartbeatLeaseMs: LEASE_MS });
  const beats: (number | null)[] = [];
  try {
    const refund = ledger.wrap<{ orderId: string }, { id: string; amount_minor: number }>(
      { action: "refund", opKey: "refund:{orderId}", target: "invoice:{orderId}", externalRef: (answer) => answer.id },
      async (_args, { opKey }) => {
        const answer = await provider.refund(opKey, 1500, "slow", 3.3);
        beats.push(await leaseBeats(opKey));
        return answer;
      },
    );
    const orderId = `HB-SLOW-${unique()}`;
    await refund({ orderId });
    const states = (await historyOf(`refund:${orderId}`)).map((version) => version.state);
    assert.equal(states.at(-1), "succeeded", states.join(" → "));
    assert.ok(!states.includes("unknown"), states.join(" → "));
    // The claim's, then one every third of the lease: nine over 3.3 s, and
    // never fewer than the three without which the lease would run out.
    assert.ok(beats[0] !== null && beats[0] !== undefined && beats[0] >= 4, `beats: ${beats[0]}`);
  } finally {
    await ledger.close();
  }
});

test("a call that answers at once sends no heartbeat: its claim started the lease", async () => {
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-heartbeats", heartbeatLeaseMs: LEASE_MS });
  const sent = statementsOf(ledger);
  const beats: (number | null)[] = [];
  try {
    // Wrapped: begun and claimed in one statement, then completed.
    const refund = ledger.wrap<{ orderId: string }, { id: string; amount_minor: number }>(
      { action: "refund", opKey: "refund:{orderId}", target: "invoice:{orderId}", externalRef: (answer) => answer.id },
      async (_args, { opKey }) => {
        beats.push(await leaseBeats(opKey));
        return provider.refund(opKey, 300);
      },
    );
    const orderId = `HB-QUICK-${unique()}`;
    await refund({ orderId });
    // Under `effect`: begun, claimed by dispatched(), then completed.
    const opKey = `refund:HB-QUICK-${unique()}`;
    await ledger.effect(intentFor(opKey), async (e) => {
      await e.dispatched();
      beats.push(await leaseBeats(opKey));
      const answer = await provider.refund(opKey, 300);
      return e.succeeded(answer.id, answer);
    });
    // Past the time a first beat would have been due: none comes late.
    await sleep(LEASE_MS);
    assert.deepEqual(beats, [1, 1], "the lease each claim started, never beaten");
    assert.deepEqual(sent, ["begin_and_dispatch", "complete_effect", "begin_and_dispatch", "mark_dispatched", "complete_effect"]);
    for (const key of [`refund:${orderId}`, opKey]) {
      assert.equal((await historyOf(key)).at(-1)?.state, "succeeded");
      assert.equal(await leaseBeats(key), null, "a settled effect's lease is dropped");
    }
  } finally {
    await ledger.close();
  }
});

test("heartbeatLeaseMs: null sends no beat", async () => {
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-heartbeats", heartbeatLeaseMs: null });
  const opKey = `refund:HB-OFF-${unique()}`;
  const leases: (number | null)[] = [];
  try {
    await ledger.effect(intentFor(opKey), async (e) => {
      await e.dispatched();
      const answer = await provider.refund(opKey, 300, "slow", 0.5);
      // A lease stays while its effect is pending: none now is none all call long.
      leases.push(await leaseBeats(opKey));
      return e.succeeded(answer.id, answer);
    });
    // Nor does its claim start a lease.
    assert.deepEqual(leases, [null]);
    assert.equal((await historyOf(opKey)).at(-1)?.state, "succeeded");
  } finally {
    await ledger.close();
  }
});

test("a claim made directly starts a lease only when asked for one", async () => {
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-heartbeats", heartbeatLeaseMs: LEASE_MS });
  const plain = intentFor(`refund:HB-PLAIN-${unique()}`);
  const leased = intentFor(`refund:HB-LEASED-${unique()}`);
  try {
    assert.equal((await ledger.begin(plain, { dispatch: true })).dispatched, true);
    assert.equal((await ledger.begin(leased)).decision, "proceed");
    assert.equal((await ledger.markDispatched(leased.opKey, leased.target, null, { lease: true })).claimed, true);
    // The plain claim keeps the window's rule; the leased one beats or is lost.
    assert.equal(await leaseBeats(plain.opKey), null);
    assert.equal(await leaseBeats(leased.opKey), 1);
    await ledger.complete(plain.opKey, plain.target, "succeeded", { externalRef: "re_plain" });
    await ledger.complete(leased.opKey, leased.target, "succeeded", { externalRef: "re_leased" });
  } finally {
    await ledger.close();
  }
});

test("a lease outside 1 s to 1 h is refused when the client is made", async () => {
  const made = (heartbeatLeaseMs: number | null | undefined) =>
    new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-heartbeats", heartbeatLeaseMs });
  for (const lease of [999, 3_600_001, 0, -1000, Number.NaN]) {
    assert.throws(() => made(lease), { name: "RangeError", message: /^heartbeatLeaseMs is from 1000 \(1 s\) to 3600000 \(1 h\), or null/ });
  }
  for (const lease of [1000, 3_600_000, null, undefined]) await made(lease).close();
});

test("a beat that fails is said and sent again at the next tick; the call goes on", async () => {
  const warnings: string[] = [];
  const ledger = new Ledger({
    connectionString: databaseUrl(),
    requestedBy: "agent-ts-heartbeats",
    heartbeatLeaseMs: LEASE_MS,
    onWarning: (message) => warnings.push(message),
  });
  // The first beat loses its connection, as in a PgBouncer restart. (Two
  // in a row would leave the third to land as the claim's lease ends.)
  const sent = statementsOf(ledger, { heartbeat: 1 });
  const opKey = `refund:HB-FAIL-${unique()}`;
  const beats: (number | null)[] = [];
  try {
    await ledger.effect(intentFor(opKey), async (e) => {
      await e.dispatched();
      const answer = await provider.refund(opKey, 300, "slow", 1.2);
      beats.push(await leaseBeats(opKey));
      return e.succeeded(answer.id, answer);
    });
    assert.equal(warnings.length, 1, warnings.join("\n"));
    assert.match(warnings[0]!, new RegExp(`a heartbeat for ${opKey} failed \\(Error: Connection terminated unexpectedly\\)`));
    // The claim's lease, moved by the beats after the lost one (two thirds
    // and a whole lease in); the lost one was tried, never counted.
    assert.ok(sent.filter((called) => called === "heartbeat").length >= 3, sent.join(", "));
    assert.ok(beats[0] !== null && beats[0] !== undefined && beats[0] >= 2, `beats: ${beats[0]}`);
    const states = (await historyOf(opKey)).map((version) => version.state);
    assert.equal(states.at(-1), "succeeded", states.join(" → "));
    assert.ok(!states.includes("unknown"), states.join(" → "));
  } finally {
    await ledger.close();
  }
});

test("a beat that finds its call lost says so once, and the answer still settles the effect", async () => {
  const warnings: string[] = [];
  const ledger = new Ledger({
    connectionString: databaseUrl(),
    requestedBy: "agent-ts-heartbeats",
    heartbeatLeaseMs: LEASE_MS,
    onWarning: (message) => warnings.push(message),
  });
  const opKey = `refund:HB-STALL-${unique()}`;
  try {
    const answer = await ledger.effect(intentFor(opKey), async (e) => {
      await e.dispatched();
      // The worker stalls, as on a long synchronous step: its event loop is
      // blocked, so no beat is sent, and the lease its claim started runs out.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, LEASE_MS * 1.5);
      await until("the warning", async () => warnings[0]);
      return e.succeeded("re_stalled", { id: "re_stalled" });
    });
    assert.deepEqual(answer, { id: "re_stalled" });
    assert.equal(warnings.length, 1, warnings.join("\n"));
    assert.match(warnings[0]!, new RegExp(`declared this call lost \\(${opKey} is unknown.*its answer will still be recorded`));
    const history = await historyOf(opKey);
    assert.deepEqual(
      history.slice(-2).map((version) => [version.state, version.error_class]),
      [
        ["unknown", "worker_lost"],
        ["succeeded", null],
      ],
    );
  } finally {
    await ledger.close();
  }
});

test("a beat that finds its call completed meanwhile stops, and says nothing", async () => {
  const warnings: string[] = [];
  const ledger = new Ledger({
    connectionString: databaseUrl(),
    requestedBy: "agent-ts-heartbeats",
    heartbeatLeaseMs: LEASE_MS,
    onWarning: (message) => warnings.push(message),
  });
  const sent = statementsOf(ledger);
  const intent = intentFor(`refund:HB-DONE-${unique()}`);
  try {
    // Beats started for a call that is completed before the first is due,
    // by a caller that did not stop them (an operator's settlement says the
    // same to a beat).
    const begun = await ledger.begin(intent, { dispatch: true, lease: true });
    assert.equal(begun.dispatched, true);
    const beats = ledger.beatFor(intent.opKey);
    assert.equal((await ledger.complete(intent.opKey, intent.target, "succeeded", { externalRef: "re_done" })).applied, true);
    // Three ticks: the first beat is told the call is over, and is the last.
    await until("the first beat", async () => (sent.includes("heartbeat") ? true : null));
    await sleep(LEASE_MS);
    await beats?.stop();
    assert.equal(sent.filter((called) => called === "heartbeat").length, 1, sent.join(", "));
    assert.deepEqual(warnings, []);
    assert.equal((await historyOf(intent.opKey)).at(-1)?.state, "succeeded");
  } finally {
    await ledger.close();
  }
});

// An action's policy may set the lease (ledger.op_set_policy(heartbeat_lease
// => ...)): a worker that asked for its own is held to the policy's, and the
// client beats by the lease the ledger answers, not by heartbeatLeaseMs. The
// action is these tests' own, so that the suite's other refunds keep theirs.
const POLICY_ACTION = "refund_policy_lease";
const POLICY_LEASE_MS = 1000;

async function heldToThePolicy(action = POLICY_ACTION, leaseMs = POLICY_LEASE_MS): Promise<void> {
  await sql(
    `select * from ledger.op_set_policy(action => $1, operator => 'test', reason => 'test',
       heartbeat_lease => make_interval(secs => $2::float8))`,
    [action, leaseMs / 1000],
  );
}

/** `opKey`'s state and error class in every view of now, as `state/error_class`. */
async function shownOf(opKey: string): Promise<string> {
  const [row] = await sql<{ state: string; error_class: string | null }>(
    "select state, error_class from ledger.effects_at(null) where op_key = $1",
    [opKey],
  );
  return row === undefined ? "none" : `${row.state}/${row.error_class}`;
}

/** What `opKey` showed while `call` ran (looked at every 250 ms) and once it ended, and the call's answer. */
async function watched<T>(opKey: string, call: Promise<T>): Promise<{ answer: T; states: Set<string> }> {
  let done = false;
  const answer = call.finally(() => {
    done = true;
  });
  const states = new Set<string>();
  while (!done) {
    states.add(await shownOf(opKey));
    await Promise.race([sleep(250), answer.catch(() => undefined)]);
  }
  states.add(await shownOf(opKey));
  return { answer: await answer, states };
}

test("a slow call beats by the lease its action's policy sets, not by the client's own", async (t) => {
  await heldToThePolicy();
  const warnings: string[] = [];
  // Left at its default 15 s lease: by it the first beat would come 5 s in.
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-heartbeats", onWarning: (message) => warnings.push(message) });
  assert.equal(ledger.heartbeatLeaseMs, 15_000);
  const leases: number[] = [];
  const sent = statementsOf(ledger, {}, leases);
  const seen: { beats: number | null; states: Set<string> }[] = [];
  try {
    const refund = ledger.wrap<{ orderId: string }, { id: string; amount_minor: number }>(
      { action: POLICY_ACTION, opKey: "refund:{orderId}", target: "invoice:{orderId}", externalRef: (answer) => answer.id },
      async (_args, { opKey }) => {
        const { answer, states } = await watched(opKey, provider.refund(opKey, 1500, "slow", 3.5));
        seen.push({ beats: await leaseBeats(opKey), states });
        return answer;
      },
    );
    const orderId = `HB-POLICY-${unique()}`;
    await refund({ orderId });
    const [{ beats, states }] = seen as [{ beats: number | null; states: Set<string> }];
    t.diagnostic(
      `a call of 3.5 s under a policy lease of ${POLICY_LEASE_MS} ms (the client's own 15000 ms): ${beats} beats, the claim's first; ` +
        `${sent.filter((called) => called === "heartbeat").length} sent, asking ${[...new Set(leases)].join(", ")} ms`,
    );
    assert.deepEqual([...states], ["pending/null"]);
    // The claim's, then one every third of the policy's lease (ten in 3.5
    // s), never fewer than one in each lease after the claim's.
    assert.ok(beats !== null && beats >= 5, `beats: ${beats}`);
    // Each beat asked for the lease in force the ledger answered.
    assert.ok(leases.length > 0 && leases.every((lease) => lease === POLICY_LEASE_MS), leases.join(", "));
    const history = (await historyOf(`refund:${orderId}`)).map((version) => version.state);
    assert.equal(history.at(-1), "succeeded", history.join(" → "));
    assert.ok(!history.includes("unknown"), history.join(" → "));
    assert.equal(await shownOf(`refund:${orderId}`), "succeeded/null");
    assert.deepEqual(warnings, []);
  } finally {
    await ledger.close();
  }
});

test("a worker held to its action's policy lease is unknown (worker_lost) within it once SIGKILLed", async (t) => {
  await heldToThePolicy();
  const opKey = `refund:HB-POLICY-KILL-${unique()}`;
  const script = new URL("./worker.js", import.meta.url).pathname;
  const worker = spawn(process.execPath, [script, opKey, "default", POLICY_ACTION], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    await started(worker);
    // Beating by the policy's second: by its own 15 s the first beat would
    // come 5 s in, after the claim's lease had run out.
    await until("two beats by the policy's lease", async () => ((await leaseBeats(opKey)) ?? 0) >= 3 || null);
    assert.equal(await shownOf(opKey), "pending/null");
    worker.kill("SIGKILL");
    const killed = Date.now();
    const lastError = await until(
      "the effect in the unknown pane",
      async () =>
        (await sql<{ last_error: string }>("select last_error from ledger.unknown_outcomes_at(null) where op_key = $1", [opKey]))[0]
          ?.last_error,
      POLICY_LEASE_MS + 5_000,
    );
    const took = Date.now() - killed;
    t.diagnostic(`SIGKILL to unknown (worker_lost), its own lease 15000 ms, its action's policy ${POLICY_LEASE_MS} ms: ${took} ms`);
    assert.match(lastError, /^worker_lost/);
    assert.equal(await shownOf(opKey), "unknown/worker_lost");
    assert.ok(took < POLICY_LEASE_MS + 2_000, `took ${took} ms`);
  } finally {
    worker.kill("SIGKILL");
  }
});

test("a lease a beat is answered is followed from the next beat", async () => {
  // An action with no policy yet: the claim holds the client's 3 s; the
  // policy's second, set while the call runs, is answered by the first beat
  // (a second in), and the beats after it go by it.
  const action = `refund_policy_later_${unique()}`;
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-heartbeats", heartbeatLeaseMs: 3000 });
  const leases: number[] = [];
  statementsOf(ledger, {}, leases);
  const opKey = `refund:HB-POLICY-LATER-${unique()}`;
  try {
    const states = await ledger.effect({ ...intentFor(opKey), action }, async (e) => {
      await e.dispatched();
      await heldToThePolicy(action);
      const { answer, states } = await watched(opKey, provider.refund(opKey, 300, "slow", 2.6));
      await e.succeeded(answer.id, answer);
      return [...states];
    });
    // The first beat asked for the claim's 3 s and was told 1 s; four more
    // came in the 1.6 s left (by 3 s, one).
    assert.ok(leases[0] === 3000 && leases.length >= 4 && leases.slice(1).every((lease) => lease === 1000), leases.join(", "));
    assert.deepEqual(states, ["pending/null"]);
    const history = (await historyOf(opKey)).map((version) => version.state);
    assert.equal(history.at(-1), "succeeded", history.join(" → "));
    assert.ok(!history.includes("unknown"), history.join(" → "));
  } finally {
    await ledger.close();
  }
});

test("a claim read back after its reply was lost beats at once to learn its lease", async () => {
  await heldToThePolicy();
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-heartbeats" });
  // The begin that claimed the effect (and started the policy's lease) is
  // carried out, its reply lost: the claim read back does not say the lease
  // in force, so the first beat goes at once and its answer does.
  const pool = (ledger as unknown as { pool: pg.Pool }).pool;
  const seam = pool as unknown as { query: (text: string, values?: unknown[]) => Promise<pg.QueryResult> };
  const query = seam.query.bind(pool);
  const sent: string[] = [];
  seam.query = async (text, values) => {
    const called = /ledger\.(\w+)\(/.exec(text)?.[1] ?? text;
    sent.push(called);
    const answer = await query(text, values);
    if (called === "begin_and_dispatch" && sent.filter((one) => one === called).length === 1) {
      throw new Error("Connection terminated unexpectedly");
    }
    return answer;
  };
  const seen: string[] = [];
  try {
    const refund = ledger.wrap<{ orderId: string }, { id: string; amount_minor: number }>(
      { action: POLICY_ACTION, opKey: "refund:{orderId}", target: "invoice:{orderId}", externalRef: (answer) => answer.id },
      async (_args, { opKey }) => {
        const { answer, states } = await watched(opKey, provider.refund(opKey, 300, "slow", 2.5));
        seen.push(...states);
        return answer;
      },
    );
    const orderId = `HB-POLICY-LOST-${unique()}`;
    await refund({ orderId });
    assert.equal(sent.filter((called) => called === "begin_and_dispatch").length, 1, sent.join(", "));
    assert.ok(sent.filter((called) => called === "heartbeat").length >= 5, sent.join(", "));
    assert.deepEqual(seen, ["pending/null"]);
    const history = (await historyOf(`refund:${orderId}`)).map((version) => version.state);
    assert.equal(history.at(-1), "succeeded", history.join(" → "));
    assert.ok(!history.includes("unknown"), history.join(" → "));
  } finally {
    await ledger.close();
  }
});
