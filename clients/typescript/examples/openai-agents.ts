// A refund tool for the OpenAI Agents SDK, driven by its Runner. A scripted
// model stands in for yours (any model name or Model): it asks for the
// refund, asks again as a model that retries does, then asks for another
// amount under the same approval. Run it with DATABASE_URL naming a
// ledger: node dist/examples/openai-agents.js
import { Agent, run, setTracingDisabled } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents/testing";
import { z } from "zod";
import { Ledger } from "effectwatch";
import { effectTool } from "effectwatch/openai-agents";
import { payments } from "./payments.js";

const ledger = new Ledger({ connectionString: process.env.DATABASE_URL!, requestedBy: "refund-agent" });
const refund = ledger.wrap(
  { action: "refund", opKey: "refund:{invoice}:{approval}", target: "invoice:{invoice}", amountMinor: "amount_minor", currency: "currency" },
  (args: { invoice: string; approval: string; amount_minor: number; currency: string }, { opKey }) =>
    payments.refund(args.invoice, args.amount_minor, args.currency, { idempotencyKey: opKey }),
);

setTracingDisabled(true); // the scripted model has no OpenAI account to send traces to
const asks = (callId: string, amount: number) => [
  functionCall("refund", { invoice: "INV-9", approval: "AP-4", amount_minor: amount, currency: "EUR" }, { callId }),
];
const model = new ScriptedModel([asks("call_1", 1500), asks("call_2", 1500), asks("call_3", 2500), [assistantMessage("INV-9 is refunded once.")]]);

const refundTool = effectTool(refund, {
  name: "refund",
  description: "Refund an invoice. Calling it again with the same arguments returns the same refund.",
  parameters: z.object({ invoice: z.string(), approval: z.string(), amount_minor: z.number().int(), currency: z.string() }),
});
const agent = new Agent({ name: "refunds", instructions: "Refund what you are asked to, once.", model, tools: [refundTool] });
const result = await run(agent, "Refund 15 EUR on INV-9 (approval AP-4).");

for (const item of result.newItems) {
  if (item.type !== "tool_call_output_item") continue;
  console.log(`${item.rawItem.callId}: ${typeof item.output === "string" ? item.output : JSON.stringify(item.output)}`);
}
console.log(`model: ${result.finalOutput}`);
console.log(`the provider was called ${payments.calls} time(s)`);
await ledger.close();
