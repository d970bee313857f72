// What the tests share: the ledger they run against (a fresh database made
// by the one test command), a prefix that keeps each test's keys apart, and
// a fake refund provider listening on 127.0.0.1.

import { createServer, type Server } from "node:http";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { ProviderError, RateLimited } from "../src/index.js";

export function databaseUrl(): string {
  const url = process.env["EFFECTWATCH_TEST_DATABASE_URL"];
  if (!url) throw new Error("EFFECTWATCH_TEST_DATABASE_URL names the ledger these tests run against");
  return url;
}

export function unique(): string {
  return randomUUID().slice(0, 8);
}

export async function sql<Row extends pg.QueryResultRow>(query: string, values: unknown[] = []): Promise<Row[]> {
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  try {
    return (await client.query<Row>(query, values)).rows;
  } finally {
    await client.end();
  }
}

export type Behaviour = "ok" | "slow" | "drop" | "500" | "429";

/**
 * A refund provider: POST /refunds with an Idempotency-Key records the call
 * and answers a refund, or misbehaves as the body's "behave" says ("drop"
 * acts, then closes the socket without an answer).
 */
export class FakeProvider {
  readonly calls = new Map<string, number>();
  private server: Server | undefined;
  port = 0;

  async start(): Promise<void> {
    this.server = createServer((request, response) => {
      let body = "";
      request.on("data", (chunk: Buffer) => (body += chunk.toString()));
      request.on("end", () => {
        const parsed = JSON.parse(body || "{}") as { behave?: Behaviour; delay?: number; amount_minor?: number };
        const key = String(request.headers["idempotency-key"] ?? "");
        if (parsed.behave === "429") {
          response.writeHead(429, { "Retry-After": "7" }).end('{"error":"slow down"}');
          return;
        }
        this.calls.set(key, (this.calls.get(key) ?? 0) + 1);
        const answer = () => {
          if (parsed.behave === "drop") {
            request.socket.destroy();
          } else if (parsed.behave === "500") {
            response.writeHead(500).end('{"error":"internal"}');
          } else {
            response
              .writeHead(200, { "Content-Type": "application/json" })
              .end(JSON.stringify({ id: `re_${key}`, amount_minor: parsed.amount_minor, status: "succeeded" }));
          }
        };
        if (parsed.behave === "slow") setTimeout(answer, (parsed.delay ?? 1) * 1000);
        else answer();
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, "127.0.0.1", resolve));
    const address = this.server.address();
    this.port = typeof address === "object" && address !== null ? address.port : 0;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }

  callsFor(key: string): number {
    return this.calls.get(key) ?? 0;
  }

  /** The agent's side of the call, with fetch: what a real tool would do. */
  async refund(key: string, amountMinor: number, behave: Behaviour = "ok", delay?: number): Promise<{ id: string; amount_minor: number }> {
    const response = await fetch(`http://127.0.0.1:${this.port}/refunds`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "Idempotency-Key": key },
      body: JSON.stringify({ amount_minor: amountMinor, behave, delay }),
    });
    if (response.status === 429) throw new RateLimited(Number(response.headers.get("Retry-After") ?? 60));
    if (response.status >= 500) throw new ProviderError(response.status, await response.text());
    return (await response.json()) as { id: string; amount_minor: number };
  }
}

/** How many beats the lease on `opKey`'s provider call has had, or null while it has none. */
export async function leaseBeats(opKey: string): Promise<number | null> {
  const [lease] = await sql<{ beats: string }>(
    "select w.beats from ledger.worker_leases w join ledger.effects e on e.id = w.effect_id where e.op_key = $1",
    [opKey],
  );
  return lease === undefined ? null : Number(lease.beats);
}

/** Each version of `opKey`'s effect: its state and error class. */
export async function historyOf(opKey: string): Promise<{ state: string; error_class: string | null }[]> {
  return sql(
    `select v.state, v.error_class from ledger.effect_history v join ledger.effects e on e.id = v.effect_id
      where e.op_key = $1 order by v.version`,
    [opKey],
  );
}
