// A ledger out of reach between the provider's answer and its completion,
// as in a failover: the client keeps the answer and sends the completion
// again with backoff, for up to completionRetryForMs, saying each try
// through onWarning; the completion is then written once, and the effect
// ends succeeded. With completionRetryForMs: 0 it gives up after its three
// usual tries, as before, and the effect stays dispatched for the
// reconciler; past a bound it gives up and says so once.
//
// The outage is real: the client reaches the server through a TCP proxy in
// this test which, cut, drops the connections it carries and closes every
// new one at once, then forwards again.

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { performance } from "node:perf_hooks";
import { Ledger, aftermathOf, type Intent } from "../src/index.js";
import { databaseUrl, historyOf, sql, unique } from "./support.js";

const OUTAGE_MS = 3_000;

/**
 * Forwards TCP connections on 127.0.0.1 to the ledger's server; `cut`
 * drops the ones open and, for that long, every new one.
 */
class Proxy {
  readonly url: string;
  private readonly open = new Set<net.Socket>();
  private cutUntil = 0;

  private constructor(
    private readonly server: net.Server,
    private readonly upstream: net.NetConnectOpts,
    url: string,
  ) {
    this.url = url;
  }

  static async start(databaseUrl: string): Promise<Proxy> {
    const parsed = new URL(databaseUrl);
    const host = (parsed.searchParams.get("host") || parsed.hostname.replace(/^\[|\]$/g, "") || process.env["PGHOST"] || "127.0.0.1").split(",")[0]!;
    const port = Number((parsed.searchParams.get("port") || parsed.port || process.env["PGPORT"] || "5432").split(",")[0]);
    const upstream: net.NetConnectOpts = host.startsWith("/") ? { path: `${host}/.s.PGSQL.${port}` } : { host, port };
    let proxy: Proxy | undefined;
    const server = net.createServer((client) => proxy?.accept(client));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    const listening = typeof address === "object" && address !== null ? address.port : 0;
    const url = new URL(databaseUrl);
    url.searchParams.delete("host");
    url.searchParams.delete("port");
    url.hostname = "127.0.0.1";
    url.port = String(listening);
    proxy = new Proxy(server, upstream, url.toString());
    return proxy;
  }

  cut(ms: number): void {
    this.cutUntil = performance.now() + ms;
    for (const socket of this.open) socket.destroy();
    this.open.clear();
  }

  async close(): Promise<void> {
    this.cut(0);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket): void {
    client.on("error", () => {});
    if (performance.now() < this.cutUntil) {
      client.destroy();
      return;
    }
    const server = net.connect(this.upstream);
    server.on("error", () => {});
    this.open.add(client);
    this.open.add(server);
    const drop = () => {
      client.destroy();
      server.destroy();
      this.open.delete(client);
      this.open.delete(server);
    };
    client.on("close", drop);
    server.on("close", drop);
    client.pipe(server);
    server.pipe(client);
  }
}

/** A ledger through `proxy`, without heartbeats, its warnings kept in `said`. */
function ledgerThrough(proxy: Proxy, said: string[], completionRetryForMs?: number): Ledger {
  return new Ledger({
    connectionString: proxy.url,
    requestedBy: "agent-ts-completion-retry",
    heartbeatLeaseMs: null,
    onWarning: (message) => said.push(message),
    ...(completionRetryForMs === undefined ? {} : { completionRetryForMs }),
  });
}

function retriesOf(said: string[], key: string): string[] {
  return said.filter((message) => message.includes(`the ledger is out of reach; keeping the provider's answer for ${key} and trying again in`));
}

function givenUp(said: string[], key: string): string[] {
  return said.filter((message) => message.includes(key) && message.includes("stays dispatched for the reconciler"));
}

function intentFor(prefix: string): Intent {
  const id = unique();
  return { opKey: `refund:${prefix}-${id}`, action: "refund", target: `invoice:${prefix}-${id}`, params: { amount_minor: 1500 }, requestId: `${prefix.toLowerCase()}-${id}` };
}

/** The provider, here: a local function that answers a refund. */
async function refundLocally(key: string): Promise<{ id: string; amount_minor: number }> {
  return { id: `re_${key}`, amount_minor: 1500 };
}

async function effectRow(key: string) {
  const [row] = await sql<{ state: string; dispatched: boolean; external_ref: string | null; request_id: string | null }>(
    "select state, dispatched_at is not null as dispatched, external_ref, request_id from ledger.effects where op_key = $1",
    [key],
  );
  return row;
}

test("a completion outlasts a ledger out of reach for 3 s and is written once", async () => {
  const proxy = await Proxy.start(databaseUrl());
  const said: string[] = [];
  const ledger = ledgerThrough(proxy, said);
  try {
    assert.equal(ledger.completionRetryForMs, 30_000, "the default bound");
    const intent = intentFor("CR");
    let started = 0;
    const answer = await ledger.effect(intent, async (e) => {
      await e.dispatched();
      const refunded = await refundLocally(intent.opKey);
      // The provider answered; the ledger goes away before its completion.
      proxy.cut(OUTAGE_MS);
      started = performance.now();
      return e.succeeded(refunded.id, refunded);
    });
    const waited = performance.now() - started;
    assert.deepEqual(answer, { id: `re_${intent.opKey}`, amount_minor: 1500 });
    assert.ok(waited > OUTAGE_MS - 500 && waited < OUTAGE_MS + 8_000, `waited ${Math.round(waited)} ms`);
    // Pauses 0.2, 0.4, 0.8, 1.6 s...: more tries than the usual three.
    const retries = retriesOf(said, intent.opKey);
    assert.ok(retries.length >= 4, retries.join("\n"));
    assert.match(retries[0]!, /trying again in 0\.2 s \(out of reach for 0\.0 s, of at most 30 s: .+\)$/);
    assert.deepEqual(givenUp(said, intent.opKey), []);

    const row = await effectRow(intent.opKey);
    assert.deepEqual(row, { state: "succeeded", dispatched: true, external_ref: `re_${intent.opKey}`, request_id: intent.requestId });
    // Written once: one succeeded version, no repeat, no late result, nothing flagged.
    const history = await historyOf(intent.opKey);
    assert.equal(history.filter((version) => version.state === "succeeded").length, 1, JSON.stringify(history));
    assert.equal(history.at(-1)?.state, "succeeded");
    const attempts = await sql<{ kind: string; flagged: boolean }>("select kind, flagged from ledger.attempts where op_key = $1", [intent.opKey]);
    assert.deepEqual(
      attempts.filter((attempt) => attempt.flagged || ["completion_repeat", "late_result"].includes(attempt.kind)),
      [],
      JSON.stringify(attempts),
    );
  } finally {
    await ledger.close();
    await proxy.close();
  }
});

test("completionRetryForMs: 0 gives up as before, the effect left dispatched", async () => {
  const proxy = await Proxy.start(databaseUrl());
  const said: string[] = [];
  const ledger = ledgerThrough(proxy, said, 0);
  try {
    const intent = intentFor("CR0");
    assert.equal((await ledger.begin(intent, { dispatch: true })).dispatched, true);
    proxy.cut(OUTAGE_MS + 4_000);
    const started = performance.now();
    const thrown = await ledger
      .complete(intent.opKey, intent.target, "succeeded", { requestId: intent.requestId ?? null, externalRef: "re_cr0" })
      .catch((error: unknown) => error);
    const took = performance.now() - started;
    assert.ok(thrown instanceof Error, String(thrown));
    // Three more tries over about two seconds.
    assert.ok(took > 1_500 && took < OUTAGE_MS + 4_000, `took ${Math.round(took)} ms`);
    assert.deepEqual(said, []);
    assert.deepEqual(await effectRow(intent.opKey), { state: "pending", dispatched: true, external_ref: null, request_id: intent.requestId });
  } finally {
    await ledger.close();
    await proxy.close();
  }
});

test("a completion gives up after its bound of 1500 ms and says so once", async () => {
  const proxy = await Proxy.start(databaseUrl());
  const said: string[] = [];
  const ledger = ledgerThrough(proxy, said, 1_500);
  try {
    const intent = intentFor("CRB");
    let started = 0;
    const thrown = await ledger
      .effect(intent, async (e) => {
        await e.dispatched();
        const refunded = await refundLocally(intent.opKey);
        proxy.cut(OUTAGE_MS + 4_000);
        started = performance.now();
        return e.succeeded(refunded.id, refunded);
      })
      .catch((error: unknown) => error);
    const took = performance.now() - started;
    assert.ok(thrown instanceof Error, String(thrown));
    assert.ok(took > 1_400 && took < OUTAGE_MS + 4_000, `took ${Math.round(took)} ms`);
    assert.ok(retriesOf(said, intent.opKey).length >= 1, said.join("\n"));
    const gaveUp = givenUp(said, intent.opKey);
    assert.equal(gaveUp.length, 1, said.join("\n"));
    assert.match(gaveUp[0]!, /the ledger stayed out of reach for \d+\.\d s \(completionRetryForMs\): the provider's answer for .+ is not recorded/);
    // The provider may have acted; nothing was recorded by this caller.
    assert.deepEqual([aftermathOf(thrown)?.dispatched, aftermathOf(thrown)?.recorded], [true, null]);
    assert.deepEqual(await effectRow(intent.opKey), { state: "pending", dispatched: true, external_ref: null, request_id: intent.requestId });
  } finally {
    await ledger.close();
    await proxy.close();
  }
});

test("completionRetryForMs is 0 or more", () => {
  for (const wrong of [-1, Number.NaN]) {
    assert.throws(
      () => new Ledger({ connectionString: databaseUrl(), requestedBy: "agent-ts-completion-retry", completionRetryForMs: wrong }),
      (error: unknown) => error instanceof RangeError && /^completionRetryForMs is milliseconds, 0 or more .*not (-1|NaN)$/.test(error.message),
    );
  }
});
