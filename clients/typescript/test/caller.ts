// A process of its own that calls one refund key from several concurrent
// callers and prints what each got: the concurrency test runs several.

import { InFlight, Ledger } from "../src/index.js";
import { FakeProvider, databaseUrl } from "./support.js";

const [orderId, port, callers] = process.argv.slice(2);
const provider = new FakeProvider();
provider.port = Number(port);
const ledger = new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-tests" });
const refund = ledger.wrap<{ orderId: string; amountMinor: number }, { id: string }>(
  {
    action: "refund",
    opKey: (args) => `refund:${args.orderId}`,
    target: (args) => `invoice:${args.orderId}`,
    externalRef: (answer) => answer.id,
  },
  (args) => provider.refund(`refund:${args.orderId}`, args.amountMinor, "slow", 1.5),
);
const outcomes = await Promise.allSettled(
  Array.from({ length: Number(callers) }, () => refund({ orderId: orderId!, amountMinor: 1500 })),
);
await ledger.close();
console.log(
  JSON.stringify(
    outcomes.map((o) => (o.status === "fulfilled" ? "succeeded" : o.reason instanceof InFlight ? "InFlight" : String(o.reason))),
  ),
);
