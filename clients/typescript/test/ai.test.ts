// The Vercel AI SDK adapter in the SDK's own tool loop: generateText with a
// multi-step stop condition, driven by the SDK's MockLanguageModelV4 (no
// network, no key), calling a wrapped refund against a real ledger and the
// suite's fake provider. What counts is the provider's own state — one
// refund per business action — and what the model was told each time.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { generateText, isStepCount, type JSONSchema7 } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { Ledger, Rejected } from "../src/index.js";
import { EffectToolError, effectTool } from "../src/ai.js";
import { FakeProvider, databaseUrl, sql, unique, type Behaviour } from "./support.js";

const provider = new FakeProvider();
let ledger: Ledger;

before(async () => {
  await provider.start();
  ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-ai-sdk" });
});

after(async () => {
  await ledger.close();
  await provider.stop();
});

type RefundArgs = { order_id: string; approval: string; amount_minor: number; currency: string };

/** A wrapped refund whose provider behaves as the model's script says for the next call. */
function refundThrough(behaviour: { next: Behaviour }) {
  return ledger.wrap(
    {
      action: "refund",
      opKey: "refund:{order_id}:{approval}",
      target: "invoice:{order_id}",
      amountMinor: "amount_minor",
      currency: "currency",
      externalRef: (answer: { id: string }) => answer.id,
    },
    async (args: RefundArgs, { opKey }) => {
      const behave = behaviour.next;
      behaviour.next = "ok";
      return provider.refund(opKey, args.amount_minor, behave);
    },
  );
}

// The SDK's own model interface, as its mock takes it.
type LanguageModelV4CallOptions = Parameters<MockLanguageModelV4["doGenerate"]>[0];
type LanguageModelV4GenerateResult = Awaited<ReturnType<MockLanguageModelV4["doGenerate"]>>;

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

function callsRefund(id: string, input: Record<string, unknown>): LanguageModelV4GenerateResult {
  return {
    content: [{ type: "tool-call", toolCallId: id, toolName: "refund", input: JSON.stringify(input) }],
    finishReason: { unified: "tool-calls", raw: undefined },
    usage,
    warnings: [],
  };
}

function says(text: string): LanguageModelV4GenerateResult {
  return { content: [{ type: "text", text }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
}

/** What the model was told about its last tool call: the tool-result part of the prompt's last message. */
function lastToolAnswer(options: LanguageModelV4CallOptions): { type: string; value: unknown } {
  const last = options.prompt.at(-1);
  assert.ok(last && last.role === "tool", "the model is called back with its tool's answer");
  const part = last.content.at(-1);
  assert.ok(part && part.type === "tool-result");
  return part.output as { type: string; value: unknown };
}

/** A scripted model: each step may set the provider's behaviour for the call it asks for. */
function scriptedModel(steps: { reply: LanguageModelV4GenerateResult; provider?: Behaviour }[], behaviour: { next: Behaviour }) {
  const told: { type: string; value: unknown }[] = [];
  let step = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (options) => {
      if (step > 0) told.push(lastToolAnswer(options));
      const next = steps[step++];
      assert.ok(next, "the model is called no more than its script");
      behaviour.next = next.provider ?? "ok";
      return next.reply;
    },
  });
  return { model, told };
}

test("generateText's tool loop: one refund per business action, and every refusal is told to the model", async () => {
  const [paid, lost] = [`AI-${unique()}`, `AI-${unique()}`];
  const args = { order_id: paid, approval: "AP-1", amount_minor: 1500, currency: "EUR" };
  const lostArgs = { order_id: lost, approval: "AP-2", amount_minor: 700, currency: "EUR" };
  const behaviour: { next: Behaviour } = { next: "ok" };
  const { model, told } = scriptedModel(
    [
      { reply: callsRefund("call_1", args) },
      { reply: callsRefund("call_2", args) }, // the model retries the same refund
      { reply: callsRefund("call_3", { ...args, amount_minor: 2000 }) }, // another amount, same key
      { reply: callsRefund("call_4", lostArgs), provider: "drop" }, // the provider acts, its reply is lost
      { reply: callsRefund("call_5", lostArgs) }, // a model that retries anyway
      { reply: says("Refunded once; the second refund is being checked.") },
    ],
    behaviour,
  );
  const refund = effectTool(refundThrough(behaviour), {
    description: "Refund an order. The same arguments again return the same refund.",
    inputSchema: z.object({ order_id: z.string(), approval: z.string(), amount_minor: z.number().int(), currency: z.string() }),
  });

  const result = await generateText({ model, tools: { refund }, stopWhen: isStepCount(10), prompt: `Refund ${paid} and ${lost}.` });

  // The run completed, through every step of the script.
  assert.equal(result.text, "Refunded once; the second refund is being checked.");
  assert.equal(result.steps.length, 6);
  // The provider's own state: one refund per business action, whatever the model did.
  assert.equal(provider.callsFor(`refund:${paid}:AP-1`), 1, "the retry was replayed, the other amount refused");
  assert.equal(provider.callsFor(`refund:${lost}:AP-2`), 1, "the lost reply was not called again");

  // What the model was told, call by call.
  assert.equal(told.length, 5);
  const [first, replayed, rejected, unknown, retried] = told as [
    { type: string; value: unknown },
    { type: string; value: unknown },
    { type: string; value: string },
    { type: string; value: string },
    { type: string; value: string },
  ];
  assert.equal(first.type, "json");
  assert.deepEqual(first.value, { id: `re_refund:${paid}:AP-1`, amount_minor: 1500, status: "succeeded" });
  assert.equal(replayed.type, "json");
  assert.deepEqual(replayed.value, first.value, "a replay returns the stored result");
  assert.equal(rejected.type, "error-text");
  assert.match(rejected.value, /already used for another intent \(amount_minor: recorded 1500, now 2000/);
  assert.match(rejected.value, /Nothing was sent/);
  assert.equal(unknown.type, "error-text");
  assert.match(unknown.value, new RegExp(`This refund on invoice:${lost} \\(key refund:${lost}:AP-2\\) may already have happened`));
  assert.match(unknown.value, /answer was lost .*Do not call it again/s);
  assert.equal(retried.type, "error-text");
  assert.match(retried.value, /may already have happened.*Do not call it again/s);

  // The application sees the same errors, with what was thrown as their cause.
  const errors = result.steps.flatMap((s) => s.content).flatMap((part) => (part.type === "tool-error" ? [part.error] : []));
  assert.equal(errors.length, 3);
  assert.ok(errors.every((error) => error instanceof EffectToolError));
  const [rejectedError, unknownError] = errors as [EffectToolError, EffectToolError];
  assert.ok(rejectedError.cause instanceof Rejected);
  assert.deepEqual([rejectedError.mayHaveHappened, unknownError.mayHaveHappened], [false, true]);

  // And the ledger holds the same story.
  const rows = await sql<{ op_key: string; state: string; error_class: string | null }>(
    "select op_key, state, error_class from ledger.effects where op_key = any($1) order by op_key",
    [[`refund:${paid}:AP-1`, `refund:${lost}:AP-2`]],
  );
  assert.deepEqual(
    Object.fromEntries(rows.map((row) => [row.op_key, [row.state, row.error_class]])),
    { [`refund:${paid}:AP-1`]: ["succeeded", null], [`refund:${lost}:AP-2`]: ["unknown", "connection_reset"] },
  );
});

test("a JSON schema is the tool's schema as given, and an argument no key can be made from is told, not sent", async () => {
  const order = `AJ-${unique()}`;
  const behaviour: { next: Behaviour } = { next: "ok" };
  const schema: JSONSchema7 = {
    type: "object",
    properties: {
      order_id: { type: "string", description: "The order to refund" },
      approval: { type: "string" },
      amount_minor: { type: "number" },
      currency: { type: "string" },
    },
    required: ["order_id", "approval", "amount_minor", "currency"],
    additionalProperties: false,
  };
  const { model, told } = scriptedModel(
    [
      { reply: callsRefund("call_1", { order_id: order, approval: "AP-1", amount_minor: 15.5, currency: "EUR" }) },
      { reply: callsRefund("call_2", { order_id: order, approval: "AP-1", amount_minor: 1550, currency: "EUR" }) },
      { reply: says("Refunded 15.50 EUR.") },
    ],
    behaviour,
  );
  const refund = effectTool(refundThrough(behaviour), { description: "Refund an order, in minor units.", inputSchema: schema });

  const result = await generateText({ model, tools: { refund }, stopWhen: isStepCount(5), prompt: `Refund 15.50 EUR on ${order}.` });

  // The model was offered the tool by its name, description and schema.
  const offered = model.doGenerateCalls[0]?.tools?.[0];
  assert.ok(offered && offered.type === "function");
  assert.deepEqual([offered.name, offered.description], ["refund", "Refund an order, in minor units."]);
  assert.deepEqual(offered.inputSchema, schema);

  assert.equal(result.text, "Refunded 15.50 EUR.");
  const [refused, refunded] = told as [{ type: string; value: string }, { type: string; value: unknown }];
  assert.equal(refused.type, "error-text");
  assert.match(refused.value, /amount_minor .*Nothing was done: no effect was recorded and the provider was not called/s);
  assert.equal(refunded.type, "json");
  assert.equal(provider.callsFor(`refund:${order}:AP-1`), 1);
});
