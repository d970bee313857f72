// A reply lost after the ledger carried the call out: the statement ran and
// committed on the server, then the connection was lost before its answer
// came back. The client tries again: it reads the effect back, recognises
// by its attempt id what the first send did (sending the call again where
// that does not show), and the call goes on: one provider call, the effect
// succeeded, nothing flagged, the key not left in flight. Another attempt
// is never taken for this one, and an error the ledger answered is never
// sent again.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { InFlight, Ledger, NotPerformed } from "../src/index.js";
import { FakeProvider, databaseUrl, sql, unique } from "./support.js";

const provider = new FakeProvider();

before(async () => {
  await provider.start();
});

after(async () => {
  await provider.stop();
});

type Statement = "begin" | "dispatch" | "complete" | "own" | "other";

function statementOf(text: string): Statement {
  if (text.includes("ledger.begin_and_dispatch(")) return "begin";
  if (text.includes("ledger.mark_dispatched(")) return "dispatch";
  if (text.includes("ledger.complete_effect(")) return "complete";
  if (text.includes("owner_role = session_user")) return "own";
  return "other";
}

// What node-postgres says when the server's connection goes away.
function lostReply(): Error {
  return new Error("Connection terminated unexpectedly");
}

type Query = (text: string, values?: unknown[]) => Promise<pg.QueryResult>;

interface Losing {
  /** How many times to lose the statement's reply (1). */
  times?: number;
  /** What others do before the client sees its connection lost. */
  then?: () => Promise<void>;
  /** The first send is carried out only after the client's next statement (the read before sending it again). */
  late?: boolean;
}

/**
 * From now on, the first sends of `lost` through `ledger`'s pool are
 * carried out and committed by the server, then their connection is closed
 * (the pool drops it) before the reply is read. Answers how many times each
 * statement was sent.
 */
function losing(ledger: Ledger, lost: Statement, { times = 1, then, late = false }: Losing = {}): Map<Statement, number> {
  const sent = new Map<Statement, number>();
  const pool = (ledger as unknown as { pool: pg.Pool }).pool;
  const seam = pool as unknown as { query: Query };
  const query = seam.query.bind(pool);
  const held: [string, unknown[] | undefined][] = [];
  seam.query = async (text: string, values?: unknown[]) => {
    const statement = statementOf(text);
    const count = (sent.get(statement) ?? 0) + 1;
    sent.set(statement, count);
    if (statement === lost && count <= times) {
      if (late) {
        held.push([text, values]);
      } else {
        const client = await pool.connect();
        try {
          await client.query(text, values);
        } finally {
          client.release(true);
        }
        await then?.();
      }
      throw lostReply();
    }
    const answer = await query(text, values);
    for (let late = held.pop(); late !== undefined; late = held.pop()) await sql(late[0], late[1]);
    return answer;
  };
  return sent;
}

function refundTool(ledger: Ledger) {
  return ledger.wrap<{ orderId: string }, { id: string; amount_minor: number }>(
    { action: "refund", opKey: "refund:{orderId}", target: "invoice:{orderId}", externalRef: (answer) => answer.id },
    ({ orderId }) => provider.refund(`refund:${orderId}`, 1500),
  );
}

/**
 * The same call through `ledger.effect`, whose body claims the effect
 * itself: begin, then dispatch, two statements (a wrapped call begins and
 * claims in one).
 */
function refundInTwo(ledger: Ledger) {
  return ({ orderId }: { orderId: string }) =>
    ledger.effect(
      { opKey: `refund:${orderId}`, action: "refund", target: `invoice:${orderId}`, params: { orderId } },
      async (e) => {
        await e.dispatched();
        const answer = await provider.refund(`refund:${orderId}`, 1500);
        return e.succeeded(answer.id, answer);
      },
    );
}

/** One provider call, succeeded with its reference, no late result, nothing flagged, and (unlooked) nothing for an operator in the duplicates pane. */
async function assertDoneOnce(key: string, { unlooked = true } = {}): Promise<{ request_id: string | null }> {
  assert.equal(provider.callsFor(key), 1, "the provider was called once");
  const [row] = await sql<{ state: string; external_ref: string | null; late: boolean; attention: string | null; request_id: string | null }>(
    `select state, external_ref, late_result_at is not null as late, attention, request_id
       from ledger.effects where op_key = $1`,
    [key],
  );
  assert.deepEqual([row?.state, row?.external_ref, row?.late, row?.attention], ["succeeded", `re_${key}`, false, null]);
  const flagged = await sql<{ kind: string }>("select kind from ledger.attempts where op_key = $1 and flagged", [key]);
  assert.deepEqual(flagged, []);
  if (unlooked) {
    const looks = await sql("select look_reasons from ledger.duplicate_attempts where op_key = $1 and needs_look", [key]);
    assert.deepEqual(looks, [], "an operator is asked to look at a repeat the client recognised as its own");
  }
  return row!;
}

// How many times the lost statement is sent: a begin or a dispatch found
// carried out for this attempt is not sent again; a completion is, and the
// ledger answers the repeat as one (not applied, not late, not flagged). A
// wrapped call begins and claims in one statement ("begin": its first send
// committed means pending, dispatched, this attempt's: it goes on
// dispatched); "dispatch" is lost from a body that claims for itself.
const SENDS = { begin: 1, dispatch: 1, complete: 2 } as const;

for (const lost of ["begin", "dispatch", "complete"] as const) {
  test(`a lost reply to ${lost} is recognised: the call goes on, once`, async () => {
    const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-lost" });
    try {
      const sent = losing(ledger, lost);
      const refund = lost === "dispatch" ? refundInTwo(ledger) : refundTool(ledger);
      const orderId = `LR-${lost}-${unique()}`;
      const first = await refund({ orderId });
      assert.deepEqual([sent.get(lost), sent.get("own")], [SENDS[lost], 1]);
      // Begun and claimed in one round trip, but where the body claims itself.
      assert.equal(sent.get("dispatch") ?? 0, lost === "dispatch" ? 1 : 0);
      await assertDoneOnce(`refund:${orderId}`);
      // The key is settled, not left in flight: the same call replays.
      assert.deepEqual(await refund({ orderId }), first);
      assert.equal(provider.callsFor(`refund:${orderId}`), 1);
    } finally {
      await ledger.close();
    }
  });
}

for (const lost of ["begin", "dispatch"] as const) {
  test(`a first ${lost} carried out after the client looked is recognised`, async () => {
    const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-lost" });
    try {
      const sent = losing(ledger, lost, { late: true });
      const orderId = `LRL-${lost}-${unique()}`;
      await (lost === "dispatch" ? refundInTwo(ledger) : refundTool(ledger))({ orderId });
      // Sent again, it is answered in flight (begin, which claimed too) or not claimed
      // (dispatch): the read after says the first send was this attempt's.
      assert.deepEqual([sent.get(lost), sent.get("own")], [2, 2]);
      await assertDoneOnce(`refund:${orderId}`, { unlooked: false });
    } finally {
      await ledger.close();
    }
  });
}

test("the caller's requestId is the attempt id", async () => {
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-lost" });
  try {
    losing(ledger, "begin");
    const id = unique();
    const intent = { opKey: `refund:LRQ-${id}`, action: "refund", target: `invoice:LRQ-${id}`, params: { amount_minor: 1500 }, requestId: `turn-7-${id}` };
    await ledger.effect(intent, async (e) => {
      assert.equal(e.attemptId, intent.requestId);
      await e.dispatched();
      const answer = await provider.refund(intent.opKey, 1500);
      return e.succeeded(answer.id, answer);
    });
    assert.equal((await assertDoneOnce(intent.opKey)).request_id, intent.requestId);
  } finally {
    await ledger.close();
  }
});

test("a lost begin is only its own attempt's: another attempt of the key, its begin reply lost too, is in flight", async () => {
  const id = unique();
  const intent = { opKey: `refund:LRO-${id}`, action: "refund", target: `invoice:LRO-${id}`, params: { amount_minor: 1500 } };
  const first = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-lost" });
  const second = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-lost" });
  try {
    losing(first, "begin");
    const begun = await first.begin({ ...intent, requestId: `first-${id}` });
    assert.equal(begun.decision, "proceed", "the first attempt's own begin, its reply lost, goes on");

    const sent = losing(second, "begin");
    let ran = false;
    await assert.rejects(
      second.effect(intent, async () => {
        ran = true;
      }),
      InFlight,
    );
    assert.equal(ran, false);
    assert.equal(sent.get("begin"), 2);
    assert.equal(provider.callsFor(intent.opKey), 0);
    const [row] = await sql<{ state: string; dispatched: boolean; request_id: string }>(
      "select state, dispatched_at is not null as dispatched, request_id from ledger.effects where op_key = $1",
      [intent.opKey],
    );
    assert.deepEqual(row, { state: "pending", dispatched: false, request_id: `first-${id}` });
  } finally {
    await first.close();
    await second.close();
  }
});

test("a lost completion is not sent again over another attempt's call", async () => {
  // A failure recorded, its reply lost; meanwhile another attempt takes the
  // key again and calls the provider. Sent again, the failure would settle
  // that call as failed.
  const id = unique();
  const intent = { opKey: `refund:LRM-${id}`, action: "refund", target: `invoice:LRM-${id}`, params: { amount_minor: 1500 } };
  const otherId = `other-${id}`;
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-lost" });
  const other = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-lost" });
  try {
    const sent = losing(ledger, "complete", {
      then: async () => {
        assert.equal((await other.begin({ ...intent, requestId: otherId })).decision, "retry");
        assert.equal((await other.markDispatched(intent.opKey, intent.target, otherId)).claimed, true);
      },
    });
    await assert.rejects(
      ledger.effect(intent, async (e) => {
        await e.dispatched();
        throw new NotPerformed("the provider answered: no refund was made");
      }),
      NotPerformed,
    );
    assert.equal(sent.get("complete"), 1);
    const [row] = await sql<{ state: string; dispatched: boolean; request_id: string }>(
      "select state, dispatched_at is not null as dispatched, request_id from ledger.effects where op_key = $1",
      [intent.opKey],
    );
    assert.deepEqual(row, { state: "pending", dispatched: true, request_id: otherId });
    const answer = await provider.refund(intent.opKey, 1500);
    const completed = await other.complete(intent.opKey, intent.target, "succeeded", { externalRef: answer.id, result: answer, requestId: otherId });
    assert.deepEqual([completed.applied, completed.late], [true, false]);
    await assertDoneOnce(intent.opKey, { unlooked: false });
  } finally {
    await ledger.close();
    await other.close();
  }
});

test("an error the ledger answered is not sent again", async () => {
  const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-lost", statementTimeoutMs: 300 });
  const holder = new pg.Client({ connectionString: databaseUrl() });
  try {
    const sent = losing(ledger, "other");
    const id = unique();
    // A refusal: a key the ledger keeps for itself.
    const refused = await ledger
      .effect({ opKey: `compensate:LRE-${id}`, action: "refund", target: `invoice:LRE-${id}`, params: {} }, async () => assert.fail("refused"))
      .catch((e: unknown) => e);
    assert.equal((refused as { code?: string }).code, "42501", String(refused));
    assert.equal(sent.get("begin"), 1);
    // A statement the server cancelled: a begin kept waiting on the
    // effect's row past the statement timeout.
    const intent = { opKey: `refund:LRT-${id}`, action: "refund", target: `invoice:LRT-${id}`, params: { amount_minor: 1 } };
    assert.equal((await ledger.begin(intent)).decision, "proceed");
    await holder.connect();
    await holder.query("begin");
    await holder.query("select 1 from ledger.effects where op_key = $1 for update", [intent.opKey]);
    const cancelled = await ledger.effect(intent, async () => assert.fail("cancelled")).catch((e: unknown) => e);
    assert.equal((cancelled as { code?: string }).code, "57014", String(cancelled));
    assert.equal(sent.get("begin"), 3);
  } finally {
    await holder.end();
    await ledger.close();
  }
});

test("a ledger out of reach is tried a few times, then said", async () => {
  const ledger = new Ledger({ connectionString: "postgres://nobody@127.0.0.1:1/none", requestedBy: "agent-ts-lost" });
  try {
    const sent = losing(ledger, "other");
    const started = Date.now();
    const thrown = await ledger
      .effect({ opKey: `refund:LRU-${unique()}`, action: "refund", target: "invoice:LRU", params: {} }, async () => assert.fail("unreachable"))
      .catch((e: unknown) => e);
    assert.equal((thrown as { code?: string }).code, "ECONNREFUSED", String(thrown));
    // One try, and three more, each of which reads the effect back first
    // (whether the lost send went through) and so fails there.
    assert.deepEqual([sent.get("begin"), sent.get("own")], [1, 3]);
    const took = Date.now() - started;
    assert.ok(took > 1500 && took < 10_000, `took ${took} ms`);
  } finally {
    await ledger.close();
  }
});
