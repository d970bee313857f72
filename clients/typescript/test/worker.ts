// A worker process of its own whose provider call never ends: it says
// "started" on stdout once the call is under way (its claim has started the
// lease), and the heartbeat test kills it there (or once it has beaten).
//   node worker.js OP_KEY LEASE_MS [ACTION]
// LEASE_MS `default` leaves the client's own default lease; ACTION is
// `refund` unless given.

import { Ledger } from "../src/index.js";
import { databaseUrl } from "./support.js";

const [opKey, leaseMs, action = "refund"] = process.argv.slice(2);
const ledger = new Ledger({
  connectionString: databaseUrl(),
  requestedBy: "agent-ts-worker",
  ...(leaseMs === "default" ? {} : { heartbeatLeaseMs: Number(leaseMs) }),
});
await ledger.effect({ opKey: opKey!, action, target: `invoice:${opKey}`, params: { amount_minor: 700 } }, async (e) => {
  await e.dispatched();
  console.log("started");
  // The heartbeats' own timer does not keep a process alive: this one does.
  return new Promise<never>(() => setInterval(() => undefined, 60_000));
});
