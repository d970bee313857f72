// A wrapped call's cost per effect, p50/p99 and effects per second, one at
// a time and several at once: begun and claimed in one round trip (now)
// against begin, then dispatch (before begin_and_dispatch). Heartbeats are
// on, as by default (a 15 s lease): the claim starts the lease in its own
// statement and these calls answer long before a first beat is due, so the
// round trips counted are all there are. A database with the ledger's
// migrations, after `npm test` (or `tsc -p .`) built it:
//
//     node dist/bench/bench.js postgres://.../ledger [effects] [concurrent]

import { randomUUID } from "node:crypto";
import { Ledger } from "../src/index.js";

async function measure(url: string, oneRoundTrip: boolean, effects: number, concurrent: number): Promise<string> {
  const ledger = new Ledger({ connectionString: url, requestedBy: "bench", maxConnections: concurrent });
  (ledger as unknown as { oneRoundTrip: boolean }).oneRoundTrip = oneRoundTrip;
  const refund = ledger.wrap<{ key: string }, { ok: boolean }>(
    { action: "refund", opKey: "bench:{key}", target: "invoice:{key}" },
    async () => ({ ok: true }),
  );
  const prefix = randomUUID().slice(0, 12);
  const took: number[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let n = next++; n < effects; n = next++) {
      const started = performance.now();
      await refund({ key: `${prefix}-${n}` });
      took.push(performance.now() - started);
    }
  };
  // Warm the pool's connections before measuring.
  await Promise.all(Array.from({ length: concurrent }, (_, n) => refund({ key: `${prefix}-warm-${n}` })));
  const began = performance.now();
  await Promise.all(Array.from({ length: concurrent }, worker));
  const wall = performance.now() - began;
  await ledger.close();
  took.sort((a, b) => a - b);
  const at = (q: number): string => (took[Math.min(took.length - 1, Math.floor(q * took.length))] ?? 0).toFixed(2);
  const how = oneRoundTrip ? "wrapped call, 2 round trips (now)" : "wrapped call, 3 round trips (before)";
  return `${concurrent} at once, ${how}: p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, ${Math.round((took.length / wall) * 1000)} effects/s`;
}

const [url, effects = "500", concurrent = "8"] = process.argv.slice(2);
if (url === undefined) throw new Error("usage: node dist/bench/bench.js postgres://.../ledger [effects] [concurrent]");
for (const at of [1, Number(concurrent)]) {
  for (const one of [false, true]) console.log(await measure(url, one, Number(effects), at));
}
