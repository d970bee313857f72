// The client against a real ledger and a real provider on 127.0.0.1: one
// provider call per key however many callers race, every way a call can
// end recorded as the ledger's rules say, and nothing sent on a mismatch.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import {
  BadArgument,
  BusinessRejection,
  Held,
  InFlight,
  Ledger,
  NotPerformed,
  NotYours,
  Rejected,
  Stop,
  UnstorableResult,
  Wait,
} from "../src/index.js";
import { execFile } from "node:child_process";
import pg from "pg";
import { promisify } from "node:util";
import { FakeProvider, databaseUrl, sql, unique } from "./support.js";

const provider = new FakeProvider();
let ledger: Ledger;

before(async () => {
  await provider.start();
  ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-tests" });
});

after(async () => {
  await ledger.close();
  await provider.stop();
});

interface Effect {
  state: string;
  error_class: string | null;
  retryable: boolean | null;
  external_ref: string | null;
  retry_not_before: Date | null;
}

async function effect(opKey: string): Promise<Effect> {
  const [row] = await sql<Effect>(
    "select state, error_class, retryable, external_ref, retry_not_before from ledger.effects where op_key = $1",
    [opKey],
  );
  assert.ok(row, `the ledger has ${opKey}`);
  return row;
}

type RefundArgs = { orderId: string; approval: string; amountMinor: number };

function refundTool(behave: Parameters<FakeProvider["refund"]>[2] = "ok", delay?: number) {
  return ledger.wrap<RefundArgs, { id: string; amount_minor: number }>(
    {
      action: "refund",
      opKey: ({ orderId, approval }) => `refund:${orderId}:${approval}`,
      target: ({ orderId }) => `invoice:${orderId}`,
      amountMinor: ({ amountMinor }) => amountMinor,
      currency: () => "EUR",
      externalRef: (answer) => answer.id,
    },
    ({ orderId, approval, amountMinor }) => provider.refund(`refund:${orderId}:${approval}`, amountMinor, behave, delay),
  );
}

test("twenty concurrent calls on one key call the provider once; the others are in flight, then replay", async () => {
  const orderId = `C-${unique()}`;
  const key = `refund:${orderId}:AP-1`;
  const refund = refundTool("slow", 0.5);
  const outcomes = await Promise.allSettled(
    Array.from({ length: 20 }, () => refund({ orderId, approval: "AP-1", amountMinor: 1500 })),
  );
  const succeeded = outcomes.filter((o) => o.status === "fulfilled");
  const refused = outcomes.flatMap((o) => (o.status === "rejected" ? [o.reason as unknown] : []));
  assert.equal(provider.callsFor(key), 1, "the provider was called exactly once");
  assert.equal(succeeded.length, 1);
  assert.equal(refused.length, 19);
  for (const error of refused) assert.ok(error instanceof InFlight, `in flight, not ${String(error)}`);

  const again = await refund({ orderId, approval: "AP-1", amountMinor: 1500 });
  assert.deepEqual(again, { id: `re_${key}`, amount_minor: 1500, status: "succeeded" });
  assert.equal(provider.callsFor(key), 1, "a replay does not reach the provider");
  const [counts] = await sql<{ in_flight: number; replay: number }>(
    `select count(*) filter (where kind = 'in_flight')::int as in_flight,
            count(*) filter (where kind = 'replay')::int as replay
       from ledger.attempts where op_key = $1`,
    [key],
  );
  assert.deepEqual(counts, { in_flight: 19, replay: 1 });
});

test("four processes of five callers each on one key call the provider once", async () => {
  const orderId = `X-${unique()}`;
  const caller = new URL("./caller.js", import.meta.url).pathname;
  const runs = await Promise.all(
    Array.from({ length: 4 }, () => promisify(execFile)(process.execPath, [caller, orderId, String(provider.port), "5"])),
  );
  const outcomes = runs.flatMap((run) => JSON.parse(run.stdout) as string[]);
  assert.equal(provider.callsFor(`refund:${orderId}`), 1, "the provider was called exactly once");
  // A process that starts after the call ended gets a replay, which a
  // caller sees as the result: the ledger's attempts tell the two apart.
  assert.equal(outcomes.length, 20);
  for (const outcome of outcomes) assert.ok(outcome === "InFlight" || outcome === "succeeded", outcome);
  const [attempts] = await sql<{ n: number }>(
    "select count(*)::int as n from ledger.attempts where op_key = $1 and kind in ('in_flight', 'replay')",
    [`refund:${orderId}`],
  );
  assert.equal(attempts?.n, 19, "every caller but one was told in_flight or replay");
  const again = await ledger.effect(
    { opKey: `refund:${orderId}`, action: "refund", target: `invoice:${orderId}`, params: { orderId, amountMinor: 1500 } },
    async () => assert.fail("a replay must not run the body"),
  );
  assert.deepEqual(again, { id: `re_refund:${orderId}`, amount_minor: 1500, status: "succeeded" });
});

test("a connection is not held across the provider call", async () => {
  const single = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-tests", maxConnections: 1 });
  try {
    const run = (orderId: string) =>
      single.effect(
        { opKey: `refund:${orderId}`, action: "refund", target: `invoice:${orderId}`, params: { amount_minor: 100 } },
        async (e) => {
          await e.dispatched();
          const answer = await provider.refund(`refund:${orderId}`, 100, "slow", 0.4);
          return e.succeeded(answer.id, answer);
        },
      );
    const started = Date.now();
    const id = unique();
    await Promise.all([run(`P1-${id}`), run(`P2-${id}`), run(`P3-${id}`)]);
    // Three 0.4 s provider calls overlap on one pooled connection only if
    // none of them holds it while it waits for the provider.
    assert.ok(Date.now() - started < 1100, `took ${Date.now() - started} ms`);
  } finally {
    await single.close();
  }
});

test("an error after dispatch records unknown with its class, and the key is never sent again", async () => {
  const cases = [
    { behave: "drop" as const, errorClass: "connection_reset" },
    { behave: "500" as const, errorClass: "server_error" },
  ];
  for (const { behave, errorClass } of cases) {
    const orderId = `U-${behave}-${unique()}`;
    const key = `refund:${orderId}:AP-1`;
    const refund = refundTool(behave);
    await assert.rejects(refund({ orderId, approval: "AP-1", amountMinor: 900 }));
    const row = await effect(key);
    assert.equal(row.state, "unknown", behave);
    assert.equal(row.error_class, errorClass, behave);
    await assert.rejects(refundTool()({ orderId, approval: "AP-1", amountMinor: 900 }), InFlight);
    assert.equal(provider.callsFor(key), 1, `${behave}: sent once`);
    const [pane] = await sql("select 1 from ledger.unknown_outcomes where op_key = $1", [key]);
    assert.ok(pane, `${behave}: in the unknown pane`);
  }
});

test("a timeout after dispatch records unknown with the class timeout", async () => {
  const orderId = `T-${unique()}`;
  const key = `refund:${orderId}`;
  await assert.rejects(
    ledger.effect({ opKey: key, action: "refund", target: `invoice:${orderId}`, params: { amount_minor: 1 } }, async (e) => {
      await e.dispatched();
      const response = await fetch(`http://127.0.0.1:${provider.port}/refunds`, {
        method: "POST",
        headers: { "Idempotency-Key": key },
        body: JSON.stringify({ behave: "slow", delay: 2 }),
        signal: AbortSignal.timeout(200),
      });
      return e.succeeded(null, await response.json());
    }),
  );
  const row = await effect(key);
  assert.equal(row.state, "unknown");
  assert.equal(row.error_class, "timeout");
});

test("only NotPerformed records failed; the same key then runs again", async () => {
  const orderId = `N-${unique()}`;
  const intent = { opKey: `refund:${orderId}`, action: "refund", target: `invoice:${orderId}`, params: { amount_minor: 600 } };
  await assert.rejects(
    ledger.effect(intent, async (e) => {
      await e.dispatched();
      throw new NotPerformed("the card was refused before any money moved");
    }),
    NotPerformed,
  );
  let row = await effect(intent.opKey);
  assert.equal(row.state, "failed");
  assert.equal(row.retryable, true);

  const answer = await ledger.effect(intent, async (e) => {
    await e.dispatched();
    const sent = await provider.refund(intent.opKey, 600);
    return e.succeeded(sent.id, sent);
  });
  assert.equal(answer.id, `re_${intent.opKey}`);
  row = await effect(intent.opKey);
  assert.equal(row.state, "succeeded");
});

test("a business rejection is failed for good: the next call stops", async () => {
  const orderId = `B-${unique()}`;
  const intent = { opKey: `refund:${orderId}`, action: "refund", target: `invoice:${orderId}`, params: { amount_minor: 650 } };
  await assert.rejects(
    ledger.effect(intent, async (e) => {
      await e.dispatched();
      throw new BusinessRejection("refund exceeds the cap");
    }),
    BusinessRejection,
  );
  const row = await effect(intent.opKey);
  assert.deepEqual([row.state, row.error_class, row.retryable], ["failed", "business_rejection", false]);
  await assert.rejects(
    ledger.effect(intent, async () => assert.fail("a stopped key must not run")),
    Stop,
  );
});

test("an error before dispatch leaves the key failed and retryable, the provider untouched", async () => {
  const orderId = `E-${unique()}`;
  const intent = { opKey: `refund:${orderId}`, action: "refund", target: `invoice:${orderId}`, params: { amount_minor: 5 } };
  await assert.rejects(
    ledger.effect(intent, async () => {
      throw new Error("the agent's own validation failed");
    }),
    /validation/,
  );
  const row = await effect(intent.opKey);
  assert.deepEqual([row.state, row.retryable], ["failed", true]);
  assert.equal(provider.callsFor(intent.opKey), 0);
});

test("a rate limit records rate_limited with the provider's delay, and the next call waits", async () => {
  const orderId = `R-${unique()}`;
  const key = `refund:${orderId}:AP-1`;
  await assert.rejects(refundTool("429")({ orderId, approval: "AP-1", amountMinor: 2500 }));
  const row = await effect(key);
  assert.deepEqual([row.state, row.error_class, row.retryable], ["failed", "rate_limited", true]);
  assert.ok(row.retry_not_before, "the provider's delay is kept");
  const wait = await refundTool()({ orderId, approval: "AP-1", amountMinor: 2500 }).catch((error: unknown) => error);
  assert.ok(wait instanceof Wait, String(wait));
  assert.ok(wait.retryAfter > 5 && wait.retryAfter <= 7, `retryAfter ${wait.retryAfter}`);
});

test("a changed parameter under an old key is rejected with the fields that differ, and never reaches the provider", async () => {
  const orderId = `M-${unique()}`;
  const key = `refund:${orderId}:AP-1`;
  await refundTool()({ orderId, approval: "AP-1", amountMinor: 1500 });
  const error = await refundTool()({ orderId, approval: "AP-1", amountMinor: 1600 }).catch((e: unknown) => e);
  assert.ok(error instanceof Rejected, String(error));
  assert.deepEqual(error.differences, {
    amount_minor: { recorded: 1500, now: 1600 },
    "params.amountMinor": { recorded: 1500, now: 1600 },
  });
  assert.match(error.message, /amount_minor: recorded 1500, now 1600/);
  assert.equal(provider.callsFor(key), 1);
});

test("a second key on a busy target is held and never sent", async () => {
  const orderId = `H-${unique()}`;
  const first = { opKey: `refund:${orderId}:AP-1`, action: "refund", target: `invoice:${orderId}`, params: { amount_minor: 1 } };
  await assert.rejects(
    ledger.effect(first, async (e) => {
      await e.dispatched();
      throw new Error("lost");
    }),
  );
  await assert.rejects(
    ledger.effect({ ...first, opKey: `refund:${orderId}:AP-2` }, async () => assert.fail("a held key must not run")),
    Held,
  );
});

test("a stored result round-trips: nested JSON, decimals as strings, timestamps", async () => {
  const orderId = `J-${unique()}`;
  const stored = {
    refund_id: "re_1",
    amount: { minor: 1500, currency: "EUR", decimal: "15.00" },
    fee: "0.30",
    lines: [{ sku: "A", qty: 2, tags: ["x", null, true] }],
    created_at: "2026-12-05T02:15:00.123456+00:00",
    note: "naïve ✓ \"quoted\"",
  };
  const intent = { opKey: `refund:${orderId}`, action: "refund", target: `invoice:${orderId}`, params: { amount_minor: 1500 } };
  const first = await ledger.effect(intent, async (e) => {
    await e.dispatched();
    return e.succeeded("re_1", stored);
  });
  assert.deepEqual(first, stored);
  const replayed = await ledger.effect(intent, async () => assert.fail("a replay must not run the body"));
  assert.deepEqual(replayed, stored);
});

test("the key comes from the business arguments: distinct actions stay distinct", async () => {
  const id = unique();
  const refund = refundTool();
  await refund({ orderId: `K1-${id}`, approval: "AP-1", amountMinor: 10 });
  await refund({ orderId: `K2-${id}`, approval: "AP-1", amountMinor: 10 });
  await refund({ orderId: `K1-${id}`, approval: "AP-2", amountMinor: 10 });
  assert.equal(provider.callsFor(`refund:K1-${id}:AP-1`), 1);
  assert.equal(provider.callsFor(`refund:K2-${id}:AP-1`), 1);
  // AP-2 is a new key on a target whose AP-1 refund succeeded: a refund
  // policy leaves that to run, so it reaches the provider too.
  assert.equal(provider.callsFor(`refund:K1-${id}:AP-2`), 1);
});

// An agent's tool call as a language model writes it: the amount as a
// number or as text, an address's fields in whatever order.
type RefundRequest = { order_id: string; amount_minor: number | string; currency: string; address: Record<string, unknown> };

function templateRefundTool() {
  return ledger.wrap(
    {
      action: "refund",
      opKey: "refund:{order_id}:{amount_minor}:{address}",
      target: "invoice:{order_id}",
      normalise: { order_id: ["trim"], currency: ["trim", "upper"] },
      amountMinor: "amount_minor",
      currency: "currency",
      externalRef: (answer: { id: string }) => answer.id,
    },
    // The wrapper hands the call its canonical arguments: the amount is the integer recorded.
    (args: RefundRequest, intent) => provider.refund(intent.opKey, args.amount_minor as number),
  );
}

async function effectsOn(target: string): Promise<{ op_key: string; amount_minor: string; currency: string; params: unknown }[]> {
  return sql("select op_key, amount_minor, currency, params from ledger.effects where target = $1", [target]);
}

test("one refund written four ways is one effect and one provider call", async () => {
  const orderId = `W-${unique()}`;
  const refund = templateRefundTool();
  const calls: RefundRequest[] = [
    { order_id: orderId, amount_minor: 1500, currency: "EUR", address: { zip: "75001", city: "Paris" } },
    { order_id: ` ${orderId}`, amount_minor: "01500", currency: "eur", address: { city: "Paris", zip: "75001" } },
    { address: { zip: "75001", city: "Paris" }, currency: "EUR ", amount_minor: " 1500", order_id: orderId },
    { order_id: orderId, amount_minor: 1500.0, currency: "EUR", address: { city: "Paris", zip: "75001" } },
  ];
  const answers = [];
  for (const call of calls) answers.push(await refund(call));
  const key = `refund:${orderId}:1500:{"city":"Paris","zip":"75001"}`;
  assert.equal(provider.callsFor(key), 1, "the provider was called once");
  for (const answer of answers) assert.deepEqual(answer, { id: `re_${key}`, amount_minor: 1500, status: "succeeded" });
  const rows = await effectsOn(`invoice:${orderId}`);
  assert.deepEqual(rows, [
    {
      op_key: key,
      amount_minor: "1500",
      currency: "EUR",
      params: { order_id: orderId, amount_minor: 1500, currency: "EUR", address: { city: "Paris", zip: "75001" } },
    },
  ]);
  const [replays] = await sql<{ n: number }>("select count(*)::int as n from ledger.attempts where op_key = $1 and kind = 'replay'", [key]);
  assert.equal(replays?.n, 3, "the other three spellings replayed");
});

test("money that is not a whole number is refused before the ledger, never rounded", async () => {
  const orderId = `F-${unique()}`;
  const error = await templateRefundTool()({ order_id: orderId, amount_minor: 1500.5, currency: "EUR", address: {} }).catch((e: unknown) => e);
  assert.ok(error instanceof BadArgument, String(error));
  assert.equal(error.argument, "amount_minor");
  assert.match(error.message, /whole number of minor units, not 1500\.5\. Nothing was done/);
  assert.deepEqual(await effectsOn(`invoice:${orderId}`), []);
  assert.ok(![...provider.calls.keys()].some((key) => key.includes(orderId)), "the provider was not called");
});

test("NaN in params is refused before the ledger, not stored as null", async () => {
  const orderId = `NaN-${unique()}`;
  const error = await ledger
    .effect(
      { opKey: `refund:${orderId}`, action: "refund", target: `invoice:${orderId}`, params: { amount_minor: 100, fee: { rate: Number.NaN } } },
      async () => assert.fail("a refused call must not run"),
    )
    .catch((e: unknown) => e);
  assert.ok(error instanceof BadArgument, String(error));
  assert.deepEqual([error.argument, error.where], ["fee", "fee.rate"]);
  assert.deepEqual(await effectsOn(`invoice:${orderId}`), []);
});

test("a result JSON cannot hold leaves the effect unknown with the reason, never failed or rewritten", async () => {
  const orderId = `NR-${unique()}`;
  const intent = { opKey: `refund:${orderId}`, action: "refund", target: `invoice:${orderId}`, params: { amount_minor: 100 } };
  const error = await ledger
    .effect(intent, async (e) => {
      await e.dispatched();
      const answer = await provider.refund(intent.opKey, 100);
      return e.succeeded(answer.id, { ...answer, fee: Number.POSITIVE_INFINITY });
    })
    .catch((e: unknown) => e);
  assert.ok(error instanceof UnstorableResult, String(error));
  assert.match(error.message, /Infinity at result\.fee/);
  const [row] = await sql<{ state: string; external_ref: string; failure_reason: string }>(
    "select state, external_ref, failure_reason from ledger.effects where op_key = $1",
    [intent.opKey],
  );
  assert.deepEqual(row, { state: "unknown", external_ref: `re_${intent.opKey}`, failure_reason: "result not storable: Infinity at result.fee" });
  await assert.rejects(ledger.effect(intent, async () => assert.fail("an unknown key must not run again")), InFlight);
  assert.equal(provider.callsFor(intent.opKey), 1);
});

test("another login's key is refused and tells nothing", async (t) => {
  const id = unique().replace(/-/g, "");
  const [ownerName, strangerName] = [`ew_ts_${id}_owner`, `ew_ts_${id}_stranger`];
  for (const name of [ownerName, strangerName]) await sql(`create role "${name}" login in role effect_agent`);
  const asLogin = (name: string): string => {
    const url = new URL(databaseUrl());
    url.username = name;
    url.password = "";
    return url.toString();
  };
  const owner = new Ledger({ connectionString: asLogin(ownerName), requestedBy: "agent-a" });
  const stranger = new Ledger({ connectionString: asLogin(strangerName), requestedBy: "agent-b" });
  try {
    const intent = { opKey: `refund:NY-${id}`, action: "refund", target: `invoice:NY-${id}`, params: { amount_minor: 1500 } };
    const probe = new pg.Client({ connectionString: asLogin(ownerName) });
    try {
      await probe.connect();
    } catch (error) {
      t.skip(`the server lets no password-less login in: ${String(error)}`);
      return;
    } finally {
      await probe.end().catch(() => undefined);
    }
    await owner.effect(intent, async (e) => {
      await e.dispatched();
      return e.succeeded("re_ny", { card: "4242" });
    });
    const refused = await stranger
      .effect(intent, async () => assert.fail("another login's key must not run"))
      .catch((e: unknown) => e);
    assert.ok(refused instanceof NotYours, String(refused));
    assert.deepEqual([refused.decision, refused.state], ["refused", ""]);
    assert.match(refused.message, /another caller.*Do not retry/s);
    assert.doesNotMatch(refused.message, /4242/);
    assert.deepEqual(await stranger.begin(intent), { decision: "refused", effectId: null, state: null, result: null });
    // The owner's repeat is still its replay.
    const again = await owner.effect(intent, async () => assert.fail("a replay must not run the body"));
    assert.deepEqual(again, { card: "4242" });
  } finally {
    await owner.close();
    await stranger.close();
    for (const name of [ownerName, strangerName]) await sql(`drop role if exists "${name}"`);
  }
});
