// The OpenAI Agents SDK adapter in the SDK's own Runner: run(agent, input)
// with a Model of our own (the SDK's Model interface, no network, no key)
// that answers with scripted tool calls and reads what each call returned,
// calling a wrapped refund against a real ledger and the suite's fake
// provider. What counts is the provider's own state — one refund per
// business action — and what the model was told each time.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Agent, Runner, Usage, run, setTracingDisabled, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { z } from "zod";
import { Ledger } from "../src/index.js";
import { effectTool } from "../src/openai-agents.js";
import { FakeProvider, databaseUrl, sql, unique, type Behaviour } from "./support.js";

const provider = new FakeProvider();
let ledger: Ledger;

before(async () => {
  setTracingDisabled(true); // nothing leaves the machine
  await provider.start();
  ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-openai-agents" });
});

after(async () => {
  await ledger.close();
  await provider.stop();
});

type RefundArgs = { order_id: string; approval: string; amount_minor: number; currency: string };

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

type Step = { call: Record<string, unknown>; provider?: Behaviour } | { says: string };

/**
 * A model of our own, through the SDK's Model interface: it answers each
 * request with the next step of its script (a function call, or its final
 * message), sets the provider's behaviour for the call it asks for, and
 * keeps what the runner told it about its previous call.
 */
class ScriptModel implements Model {
  readonly told: string[] = [];
  readonly requests: ModelRequest[] = [];
  private step = 0;

  constructor(
    private readonly steps: Step[],
    private readonly behaviour: { next: Behaviour },
  ) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(request);
    if (this.step > 0) this.told.push(lastToolOutput(request));
    const next = this.steps[this.step++];
    assert.ok(next, "the model is called no more than its script");
    if ("says" in next) {
      return {
        usage: new Usage(),
        output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: next.says }] }],
      };
    }
    this.behaviour.next = next.provider ?? "ok";
    return {
      usage: new Usage(),
      output: [{ type: "function_call", name: "refund", callId: `call_${this.step}`, status: "completed", arguments: JSON.stringify(next.call) }],
    };
  }

  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("this model is not streamed");
  }
}

/** The text the runner gave the model for its last function call. */
function lastToolOutput(request: ModelRequest): string {
  assert.ok(Array.isArray(request.input));
  const last = request.input.at(-1);
  assert.ok(last && last.type === "function_call_result", "the model is called back with its tool's answer");
  const output = last.output;
  if (typeof output === "string") return output;
  assert.ok(!Array.isArray(output) && output.type === "text", `a text output, not ${JSON.stringify(output)}`);
  return output.text;
}

test("run(agent, input): one refund per business action, and every refusal is told to the model", async () => {
  const [paid, lost] = [`OA-${unique()}`, `OA-${unique()}`];
  const args = { order_id: paid, approval: "AP-1", amount_minor: 1500, currency: "EUR" };
  const lostArgs = { order_id: lost, approval: "AP-2", amount_minor: 700, currency: "EUR" };
  const behaviour: { next: Behaviour } = { next: "ok" };
  const model = new ScriptModel(
    [
      { call: args },
      { call: args }, // the model retries the same refund
      { call: { ...args, amount_minor: 2000 } }, // another amount, same key
      { call: lostArgs, provider: "drop" }, // the provider acts, its reply is lost
      { call: lostArgs }, // a model that retries anyway
      { says: "Refunded once; the second refund is being checked." },
    ],
    behaviour,
  );
  const refund = effectTool(refundThrough(behaviour), {
    name: "refund",
    description: "Refund an order. The same arguments again return the same refund.",
    parameters: z.object({ order_id: z.string(), approval: z.string(), amount_minor: z.number().int(), currency: z.string() }),
  });
  const agent = new Agent({ name: "refunds", instructions: "Refund what you are asked to, once.", model, tools: [refund] });

  const result = await run(agent, `Refund ${paid} and ${lost}.`, { maxTurns: 10 });

  // The run completed, through every step of the script.
  assert.equal(result.finalOutput, "Refunded once; the second refund is being checked.");
  assert.equal(result.newItems.filter((item) => item.type === "tool_call_output_item").length, 5);
  // The provider's own state: one refund per business action, whatever the model did.
  assert.equal(provider.callsFor(`refund:${paid}:AP-1`), 1, "the retry was replayed, the other amount refused");
  assert.equal(provider.callsFor(`refund:${lost}:AP-2`), 1, "the lost reply was not called again");

  // The model was offered the tool by its name, description and schema.
  const offered = model.requests[0]?.tools[0];
  assert.ok(offered && offered.type === "function");
  assert.deepEqual([offered.name, offered.description, offered.strict], ["refund", "Refund an order. The same arguments again return the same refund.", true]);
  assert.deepEqual(Object.keys(offered.parameters["properties"] as object), ["order_id", "approval", "amount_minor", "currency"]);

  // What the model was told, call by call.
  assert.equal(model.told.length, 5);
  const [first, replayed, rejected, unknown, retried] = model.told as [string, string, string, string, string];
  assert.deepEqual(JSON.parse(first), { id: `re_refund:${paid}:AP-1`, amount_minor: 1500, status: "succeeded" });
  assert.deepEqual(JSON.parse(replayed), JSON.parse(first), "a replay returns the stored result");
  assert.match(rejected, /already used for another intent \(amount_minor: recorded 1500, now 2000/);
  assert.match(rejected, /Nothing was sent/);
  assert.match(unknown, new RegExp(`This refund on invoice:${lost} \\(key refund:${lost}:AP-2\\) may already have happened`));
  assert.match(unknown, /answer was lost .*Do not call it again/s);
  assert.match(retried, /may already have happened.*Do not call it again/s);
  for (const text of model.told) assert.doesNotMatch(text, /Please try again/, "never the SDK's default error text");

  const rows = await sql<{ op_key: string; state: string; error_class: string | null }>(
    "select op_key, state, error_class from ledger.effects where op_key = any($1) order by op_key",
    [[`refund:${paid}:AP-1`, `refund:${lost}:AP-2`]],
  );
  assert.deepEqual(
    Object.fromEntries(rows.map((row) => [row.op_key, [row.state, row.error_class]])),
    { [`refund:${paid}:AP-1`]: ["succeeded", null], [`refund:${lost}:AP-2`]: ["unknown", "connection_reset"] },
  );
});

test("a JSON schema is the tool's schema as given; arguments refused by the schema or the key are told, not sent", async () => {
  const order = `OJ-${unique()}`;
  const behaviour: { next: Behaviour } = { next: "ok" };
  const parameters = {
    type: "object" as const,
    properties: {
      order_id: { type: "string" as const, description: "The order to refund" },
      approval: { type: "string" as const },
      amount_minor: { type: "number" as const },
      currency: { type: "string" as const },
    },
    required: ["order_id", "approval", "amount_minor", "currency"],
    additionalProperties: false as const,
  };
  const model = new ScriptModel(
    [
      { call: { order_id: order, approval: "AP-1", amount_minor: 15.5, currency: "EUR" } },
      { call: { order_id: order, approval: "AP-1", amount_minor: 1550, currency: "EUR" } },
      { says: "Refunded 15.50 EUR." },
    ],
    behaviour,
  );
  const refund = effectTool(refundThrough(behaviour), { name: "refund", description: "Refund an order, in minor units.", parameters });
  const agent = new Agent({ name: "refunds", instructions: "Refund in minor units.", model, tools: [refund] });

  const result = await new Runner().run(agent, `Refund 15.50 EUR on ${order}.`);

  const offered = model.requests[0]?.tools[0];
  assert.ok(offered && offered.type === "function");
  assert.deepEqual([offered.name, offered.description, offered.strict], ["refund", "Refund an order, in minor units.", true]);
  assert.deepEqual(offered.parameters, parameters);
  assert.equal(result.finalOutput, "Refunded 15.50 EUR.");
  const [refused] = model.told as [string];
  assert.match(refused, /amount_minor .*Nothing was done: no effect was recorded and the provider was not called/s);
  assert.equal(provider.callsFor(`refund:${order}:AP-1`), 1);
});

test("arguments the zod schema refuses are answered as not run, never the SDK's 'Please try again', and nothing is recorded", async () => {
  const order = `OZ-${unique()}`;
  const behaviour: { next: Behaviour } = { next: "ok" };
  const model = new ScriptModel(
    [{ call: { order_id: order, approval: "AP-1", amount_minor: "fifteen", currency: "EUR" } }, { says: "I could not refund it." }],
    behaviour,
  );
  const refund = effectTool(refundThrough(behaviour), {
    name: "refund",
    description: "Refund an order.",
    parameters: z.object({ order_id: z.string(), approval: z.string(), amount_minor: z.number().int(), currency: z.string() }),
  });
  const agent = new Agent({ name: "refunds", instructions: "Refund.", model, tools: [refund] });

  const result = await run(agent, `Refund ${order}.`);

  assert.equal(result.finalOutput, "I could not refund it.");
  const [told] = model.told as [string];
  // The validator's words only where tool data may be logged (OPENAI_AGENTS_DONT_LOG_TOOL_DATA=0).
  assert.match(told, /^The tool was not run: Invalid JSON input for tool(?: \(.*\))?\. Nothing was done/s);
  assert.doesNotMatch(told, /Please try again/);
  assert.equal(provider.callsFor(`refund:${order}:AP-1`), 0);
  assert.deepEqual(await sql("select 1 from ledger.effects where target = $1", [`invoice:${order}`]), []);
});
