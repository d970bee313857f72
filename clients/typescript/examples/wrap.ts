// A refund tool wrapped by the ledger: its key and target are templates
// filled from the call's business arguments. Run it with DATABASE_URL
// naming a ledger: node dist/examples/wrap.js
import { Ledger, Rejected } from "effectwatch";
import { payments } from "./payments.js";

const ledger = new Ledger({ connectionString: process.env.DATABASE_URL!, requestedBy: "refund-agent" });

const refund = ledger.wrap(
  {
    action: "refund",
    opKey: "refund:{invoice}:{approval}",
    target: "invoice:{invoice}",
    normalise: { invoice: ["trim", "upper"] },
    amountMinor: "amount_minor",
    currency: "currency",
    externalRef: (answer: { id: string }) => answer.id,
  },
  (args: { invoice: string; approval: string; amount_minor: number; currency: string }, { opKey }) =>
    payments.refund(args.invoice, args.amount_minor, args.currency, { idempotencyKey: opKey }),
);

const first = await refund({ invoice: "INV-402", approval: "AP-91", amount_minor: 1500, currency: "EUR" });
// The same refund written another way: replayed from the ledger, the provider is not called.
const again = await refund({ invoice: " inv-402 ", approval: "AP-91", amount_minor: 1500, currency: "EUR" });
console.log(`refunded ${first.id}; asked again, got ${again.id}`);
try {
  await refund({ invoice: "INV-402", approval: "AP-91", amount_minor: 2000, currency: "EUR" });
} catch (error) {
  if (!(error instanceof Rejected)) throw error;
  console.log(`another amount under the same key: ${error.message}`);
}
console.log(`the provider was called ${payments.calls} time(s)`);
await ledger.close();
