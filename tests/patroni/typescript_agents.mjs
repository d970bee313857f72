// Refund agents on concurrent async tasks, as a user runs the TypeScript
// client, while the ledger's leader moves (tests/patroni.rs installs the
// client from its `npm pack` tarball in a clean project, copies this script
// into it, starts it, then a switchover).
//
//     node typescript_agents.mjs DATABASE_URL PROVIDER_URL TASKS
//
// Every task shares one `Ledger` on DATABASE_URL (every node of the
// cluster, `target_session_attrs=read-write`) and makes refunds at the fake
// provider (POST PROVIDER_URL/v1/effects), one key after another, until this
// script's stdin closes. Even tasks use a wrapped function (`ledger.wrap`:
// the effect begun and claimed in one round trip), odd ones the primitive
// (`ledger.effect(...)`, `dispatched()`, `succeeded()`). A call that threw
// for the ledger out of reach — the client had already sent it again, over
// about 2 s, and no leader answered yet — is made again under the same
// key, as an agent would. Prints one JSON line per key, as it is told:
//   {"key", "outcome": "succeeded", "ref", "retries", "waited"}: told recorded
//      (waited: seconds from its first error with the ledger out of reach, or 0);
//   {"key", "told": "in_flight", "retries", "waited"}: the ledger holds it in flight
//      (a first try's claim or completion lost with the leader): not sent again;
//   {"key", "error"}: anything else, which the test fails on.
// And one line for each time the client said, through onWarning, that it
// keeps a provider's answer while the ledger is out of reach:
//   {"completion_retry": key, "pause", "out"}: trying the completion again;
//   {"completion_gave_up": key, "said"}: past `completionRetryForMs`.

import { InFlight, EffectError, Ledger, NotPrimary } from "effectwatch";

// How long one key may wait for a leader before the agent gives up.
const KEY_TIMEOUT_MS = 60_000;
// What an agent leaves between two keys (as the Rust agents do).
const PACE_MS = 20;

const [databaseUrl, providerUrl, tasksArg] = process.argv.slice(2);
const tasks = Number(tasksArg);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

const ledger = new Ledger({
  connectionString: databaseUrl,
  requestedBy: "typescript-agent",
  onWarning: (message) => {
    const retry = /keeping the provider's answer for (\S+) and trying again in ([\d.]+) s \(out of reach for ([\d.]+) s/.exec(message);
    if (retry) say({ completion_retry: retry[1], pause: Number(retry[2]), out: Number(retry[3]) });
    const gaveUp = /the provider's answer for (\S+) is not recorded, and the effect stays dispatched/.exec(message);
    if (gaveUp) say({ completion_gave_up: gaveUp[1], said: message });
  },
});

// What node-postgres and Node's sockets say when the ledger is out of reach.
const LOST_CODES = new Set(["ECONNRESET", "ECONNREFUSED", "ECONNABORTED", "EPIPE", "ETIMEDOUT", "57P01", "57P02", "57P03"]);
function ledgerOutOfReach(error) {
  if (error instanceof NotPrimary) return true;
  if (error instanceof EffectError) return false;
  const code = typeof error?.code === "string" ? error.code : "";
  if (LOST_CODES.has(code) || code.startsWith("08")) return true;
  return /connection terminated|terminated unexpectedly|connection error|not queryable|timeout exceeded when trying to connect/i.test(String(error?.message));
}

async function postRefund(key, target) {
  const response = await fetch(`${providerUrl}/v1/effects`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key },
    body: JSON.stringify({ kind: "refund", amount_minor: 1200, currency: "EUR", target }),
    signal: AbortSignal.timeout(5_000),
  });
  if (!response.ok) throw new Error(`the provider answered ${response.status}`);
  return response.json();
}

const refund = ledger.wrap(
  {
    action: "refund",
    opKey: "refund:{order_id}:v1",
    target: "invoice:{order_id}",
    amountMinor: "amount_minor",
    currency: "currency",
    externalRef: (answer) => String(answer.id),
  },
  async (args) => postRefund(`refund:${args.order_id}:v1`, `invoice:${args.order_id}`),
);

async function wrapped(orderId) {
  return refund({ order_id: orderId, amount_minor: 1200, currency: "EUR" });
}

async function byHand(orderId) {
  const key = `refund:${orderId}:v1`;
  const target = `invoice:${orderId}`;
  const intent = { opKey: key, action: "refund", target, params: { order_id: orderId, amount_minor: 1200, currency: "EUR" }, amountMinor: 1200, currency: "EUR" };
  return ledger.effect(intent, async (effect) => {
    await effect.dispatched();
    const answer = await postRefund(key, target);
    return effect.succeeded(String(answer.id), answer);
  });
}

let stopping = false;
let failed = false;

async function agent(index) {
  const call = index % 2 === 0 ? wrapped : byHand;
  for (let k = 0; !stopping && !failed; k++) {
    const orderId = `TS${index}n${k}`;
    const key = `refund:${orderId}:v1`;
    const started = performance.now();
    let retries = 0;
    let firstFailure = null;
    const waited = () => (firstFailure === null ? 0 : Math.round(performance.now() - firstFailure) / 1000);
    for (;;) {
      try {
        const answer = await call(orderId);
        say({ key, outcome: "succeeded", ref: answer.id, retries, waited: waited() });
        break;
      } catch (error) {
        if (error instanceof InFlight) {
          say({ key, told: "in_flight", state: error.state ?? null, retries, waited: waited() });
          break;
        }
        if (!ledgerOutOfReach(error)) {
          say({ key, error: `${error?.name}: ${error?.message}` });
          failed = true;
          return;
        }
        retries += 1;
        firstFailure ??= performance.now();
        if (performance.now() - started > KEY_TIMEOUT_MS) {
          say({ key, error: `no leader for ${KEY_TIMEOUT_MS / 1000} s: ${error?.message}` });
          failed = true;
          return;
        }
        await sleep(50);
      }
    }
    await sleep(PACE_MS);
  }
}

// The test closes stdin to stop the agents: each finishes its key first.
process.stdin.on("data", () => {});
process.stdin.on("end", () => (stopping = true));
await Promise.all(Array.from({ length: tasks }, (_, index) => agent(index)));
await ledger.close();
process.exit(failed ? 1 : 0);
