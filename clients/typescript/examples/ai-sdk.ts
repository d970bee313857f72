// A refund tool for the Vercel AI SDK, driven by generateText's tool loop.
// A scripted model stands in for yours (openai("gpt-4.1"), anthropic(...)):
// it asks for the refund, asks again as a model that retries does, then
// asks for another amount under the same approval. Run it with DATABASE_URL
// naming a ledger: node dist/examples/ai-sdk.js
import { generateText, isStepCount } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { Ledger } from "effectwatch";
import { effectTool } from "effectwatch/ai";
import { payments } from "./payments.js";

const ledger = new Ledger({ connectionString: process.env.DATABASE_URL!, requestedBy: "refund-agent" });
const refund = ledger.wrap(
  { action: "refund", opKey: "refund:{invoice}:{approval}", target: "invoice:{invoice}", amountMinor: "amount_minor", currency: "currency" },
  (args: { invoice: string; approval: string; amount_minor: number; currency: string }, { opKey }) =>
    payments.refund(args.invoice, args.amount_minor, args.currency, { idempotencyKey: opKey }),
);

const usage = { inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 0, text: 0, reasoning: 0 } };
const asks = (id: string, amount: number) => ({
  content: [{ type: "tool-call" as const, toolCallId: id, toolName: "refund", input: JSON.stringify({ invoice: "INV-7", approval: "AP-3", amount_minor: amount, currency: "EUR" }) }],
  finishReason: { unified: "tool-calls" as const, raw: undefined },
  usage,
  warnings: [],
});
const says = (text: string) => ({ content: [{ type: "text" as const, text }], finishReason: { unified: "stop" as const, raw: undefined }, usage, warnings: [] });
const model = new MockLanguageModelV4({ doGenerate: [asks("call_1", 1500), asks("call_2", 1500), asks("call_3", 2500), says("INV-7 is refunded once.")] });

const tools = {
  refund: effectTool(refund, {
    description: "Refund an invoice. Calling it again with the same arguments returns the same refund.",
    inputSchema: z.object({ invoice: z.string(), approval: z.string(), amount_minor: z.number().int(), currency: z.string() }),
  }),
};
const result = await generateText({ model, tools, stopWhen: isStepCount(6), prompt: "Refund 15 EUR on INV-7 (approval AP-3)." });

for (const part of result.steps.flatMap((step) => step.content)) {
  if (part.type === "tool-result") console.log(`${part.toolCallId}: ${JSON.stringify(part.output)}`);
  if (part.type === "tool-error") console.log(`${part.toolCallId}: error: ${String(part.error)}`);
}
console.log(`model: ${result.text}`);
console.log(`the provider was called ${payments.calls} time(s)`);
await ledger.close();
