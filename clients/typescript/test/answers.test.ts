// What a model is told for each way a wrapped call can end without a
// result (toolErrorFor), decided by what the ledger recorded for that call
// (aftermathOf), against a real ledger and the fake provider.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import {
  BadArgument,
  BusinessRejection,
  EffectToolError,
  Held,
  InFlight,
  Ledger,
  NotPerformed,
  NotYours,
  Overlap,
  Rejected,
  Stop,
  UnstorableResult,
  Wait,
  aftermathOf,
  toolErrorFor,
  type Completed,
  type Completion,
} from "../src/index.js";
import { FakeProvider, databaseUrl, sql, unique, type Behaviour } from "./support.js";

const provider = new FakeProvider();
let ledger: Ledger;

before(async () => {
  await provider.start();
  ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-answers" });
});

after(async () => {
  await ledger.close();
  await provider.stop();
});

type Args = { order_id: string; amount_minor: number };

function refundOn(on: Ledger, call: (args: Args, opKey: string) => Promise<{ id: string }>) {
  return on.wrap(
    { action: "refund", opKey: "refund:{order_id}", target: "invoice:{order_id}", amountMinor: "amount_minor", currency: () => "EUR", externalRef: (answer: { id: string }) => answer.id },
    (args: Args, { opKey }) => call(args, opKey),
  );
}

function throughProvider(behave: Behaviour) {
  return refundOn(ledger, (args, opKey) => provider.refund(opKey, args.amount_minor, behave));
}

/** What the call threw, as the model is told it. */
async function told(call: Promise<unknown>): Promise<{ thrown: unknown; answer: EffectToolError }> {
  const thrown = await call.then(
    () => assert.fail("the call was expected to fail"),
    (error: unknown) => error,
  );
  return { thrown, answer: toolErrorFor(thrown) };
}

async function stateOf(opKey: string): Promise<[string, string | null, boolean | null]> {
  const [row] = await sql<{ state: string; error_class: string | null; retryable: boolean | null }>(
    "select state, error_class, retryable from ledger.effects where op_key = $1",
    [opKey],
  );
  assert.ok(row, `the ledger has ${opKey}`);
  return [row.state, row.error_class, row.retryable];
}

test("a 5xx after dispatch: may already have happened, do not call again — and so is the next call", async () => {
  const order = `A5-${unique()}`;
  const { thrown, answer } = await told(throughProvider("500")({ order_id: order, amount_minor: 100 }));
  assert.equal((thrown as Error).name, "ProviderError", "the wrapped call rethrows what the provider threw");
  assert.deepEqual(aftermathOf(thrown)?.recorded?.outcome, "unknown");
  assert.equal(aftermathOf(thrown)?.dispatched, true);
  assert.equal(answer.mayHaveHappened, true);
  assert.equal(answer.cause, thrown);
  assert.match(answer.message, new RegExp(`^This refund on invoice:${order} \\(key refund:${order}\\) may already have happened`));
  assert.match(answer.message, /ProviderError: provider answered 500.*Do not call it again/s);
  assert.equal(String(answer), answer.message, "a framework showing String(error) shows the text only");
  assert.deepEqual(await stateOf(`refund:${order}`), ["unknown", "server_error", null]);

  const again = await told(throughProvider("ok")({ order_id: order, amount_minor: 100 }));
  assert.ok(again.thrown instanceof InFlight);
  assert.equal(again.answer.mayHaveHappened, true);
  assert.match(again.answer.message, /may already have happened: its outcome is unknown.*Do not call it again/s);
  assert.equal(provider.callsFor(`refund:${order}`), 1);
});

test("a provider that certainly did nothing: not done, may be called again with the same arguments", async () => {
  const order = `NP-${unique()}`;
  const refund = refundOn(ledger, async () => {
    throw new NotPerformed("card network down");
  });
  const { answer } = await told(refund({ order_id: order, amount_minor: 100 }));
  assert.equal(answer.mayHaveHappened, false);
  assert.match(answer.message, /was not done \(NotPerformed: card network down\): the provider did not act on it\. It may be called again with the same arguments/);
  assert.deepEqual(await stateOf(`refund:${order}`), ["failed", null, true]);
});

test("a refusal for good: not done, never retried", async () => {
  const order = `BR-${unique()}`;
  const refund = refundOn(ledger, async () => {
    throw new BusinessRejection("refund window closed");
  });
  const { answer } = await told(refund({ order_id: order, amount_minor: 100 }));
  assert.equal(answer.mayHaveHappened, false);
  assert.match(answer.message, /was refused for good by the provider \(BusinessRejection: refund window closed\)\. Nothing happened\. Do not retry it/);
  assert.deepEqual(await stateOf(`refund:${order}`), ["failed", "business_rejection", false]);
});

test("a rate limit: not done, call again after the provider's delay", async () => {
  const order = `RL-${unique()}`;
  const { answer } = await told(throughProvider("429")({ order_id: order, amount_minor: 100 }));
  assert.equal(answer.mayHaveHappened, false);
  assert.match(answer.message, /the provider asked to wait .*Call it again with the same arguments after 7 seconds/s);
});

test("a ledger out of reach before anything was sent: not done, nothing sent", async () => {
  const unreachable = new Ledger({ connectionString: "postgres://nobody@127.0.0.1:1/none", requestedBy: "agent-ts-answers" });
  try {
    let called = false;
    const refund = refundOn(unreachable, async () => {
      called = true;
      return { id: "never" };
    });
    const { thrown, answer } = await told(refund({ order_id: `LD-${unique()}`, amount_minor: 100 }));
    assert.deepEqual([aftermathOf(thrown)?.dispatched, aftermathOf(thrown)?.recorded], [false, null]);
    assert.equal(called, false);
    assert.equal(answer.mayHaveHappened, false);
    assert.match(answer.message, /was not done: it failed before the provider was called \(.*\), so nothing was sent/);
  } finally {
    await unreachable.close();
  }
});

test("a ledger lost after the provider acted: may already have happened, do not call again", async () => {
  class LostAfterDispatch extends Ledger {
    override async complete(_opKey: string, _target: string, _outcome: string, _fields?: Completion): Promise<Completed> {
      throw Object.assign(new Error("Connection terminated unexpectedly"), { code: "ECONNRESET" });
    }
  }
  const lost = new LostAfterDispatch({ connectionString: databaseUrl(), requestedBy: "agent-ts-answers" });
  try {
    const order = `LA-${unique()}`;
    const refund = refundOn(lost, (args, opKey) => provider.refund(opKey, args.amount_minor));
    const { thrown, answer } = await told(refund({ order_id: order, amount_minor: 100 }));
    assert.deepEqual([aftermathOf(thrown)?.dispatched, aftermathOf(thrown)?.recorded], [true, null]);
    assert.equal(provider.callsFor(`refund:${order}`), 1);
    assert.equal(answer.mayHaveHappened, true);
    assert.match(answer.message, /may already have happened: the provider was called, but its outcome could not be recorded in the effect ledger .*Do not call it again/s);
    // The ledger still shows it dispatched and unsettled, for the overdue pane and the reconciler.
    const [row] = await sql<{ state: string; dispatched: boolean }>(
      "select state, dispatched_at is not null as dispatched from ledger.effects where op_key = $1",
      [`refund:${order}`],
    );
    assert.deepEqual(row, { state: "pending", dispatched: true });
  } finally {
    await lost.close();
  }
});

test("a key that cannot be made, and an error from elsewhere", async () => {
  const refund = ledger.wrap(
    {
      action: "refund",
      opKey: () => {
        throw new TypeError("no approval in this call");
      },
      target: "invoice:{order_id}",
    },
    async (_args: { order_id: string }) => ({ id: "never" }),
  );
  const { thrown, answer } = await told(refund({ order_id: `KF-${unique()}` }));
  assert.deepEqual(aftermathOf(thrown), { intent: null, dispatched: false, recorded: null });
  assert.match(answer.message, /^This call was not done: it failed before the provider was called \(TypeError: no approval in this call\)/);

  const elsewhere = toolErrorFor(new Error("socket hang up"));
  assert.equal(elsewhere.mayHaveHappened, true, "what the ledger did not see is treated as possibly done");
  assert.match(elsewhere.message, /outcome is not known: it may already have happened\. Do not call it again/);
  assert.equal(toolErrorFor(elsewhere), elsewhere);
});

test("every refusal is told in its own words; only what may have reached the provider says so", () => {
  const cases: [Error, boolean][] = [
    [new InFlight("refund:K", "pending"), true],
    [new UnstorableResult("refund:K", "re_1", "NaN at result.fee"), true],
    [new Held("refund:K", "held"), false],
    [new Rejected("refund:K", "succeeded", { amount_minor: { recorded: 1500, now: 2000 } }), false],
    [new Stop("refund:K", "failed", null), false],
    [new Overlap("refund:K", "succeeded", ["booking:1"]), false],
    [new Wait("refund:K", "failed", 30), false],
    [new NotYours("refund:K"), false],
    [new BadArgument("amount_minor", "is 15.5, not a whole number of minor units", "Send it in minor units."), false],
  ];
  for (const [error, mayHaveHappened] of cases) {
    const answer = toolErrorFor(error);
    assert.equal(answer.message, error.message, `${error.name} is told in its own words`);
    assert.equal(answer.mayHaveHappened, mayHaveHappened, error.name);
    assert.equal(answer.cause, error);
  }
});
