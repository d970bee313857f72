// A URL listing several hosts, as libpq writes it for a Patroni cluster
// (`h1:5432,h2:5432/ledger?target_session_attrs=read-write`), which
// node-postgres cannot parse: the client splits it into one URL per host
// and follows the one that takes writes. Against the test server: a host
// that does not answer is passed over, and so is one that answers
// read-only (a database of this test's own made read-only, as a standby
// answers), until it takes writes again.

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import pg from "pg";
import { Ledger, NotPrimary } from "../src/index.js";
import { PrimaryPool, hostsOf } from "../src/primary.js";
import { databaseUrl, sql, unique } from "./support.js";

test("a URL of several hosts becomes one URL per host, target_session_attrs taken out", () => {
  assert.deepEqual(hostsOf("postgres://u:p@h1:5432,h2:5433,h3/ledger?target_session_attrs=read-write&sslmode=disable"), {
    urls: ["postgres://u:p@h1:5432/ledger?sslmode=disable", "postgres://u:p@h2:5433/ledger?sslmode=disable", "postgres://u:p@h3/ledger?sslmode=disable"],
    wanted: "primary",
  });
  // Several hosts want the primary unless told `any`, as the Rust pool.
  assert.equal(hostsOf("postgresql://h1,h2/l")?.wanted, "primary");
  assert.equal(hostsOf("postgres://h1,h2/l?target_session_attrs=primary")?.wanted, "primary");
  assert.deepEqual(hostsOf("postgres://h1,h2/l?target_session_attrs=any"), { urls: ["postgres://h1/l", "postgres://h2/l"], wanted: "any" });
  // One host, with the attribute: still checked, as libpq does.
  assert.deepEqual(hostsOf("postgres://h1/l?target_session_attrs=read-write"), { urls: ["postgres://h1/l"], wanted: "primary" });
  // What node-postgres takes as it is, left to it.
  assert.equal(hostsOf("postgres://u@h1:5432/ledger?sslmode=disable"), null);
  assert.equal(hostsOf("host=/tmp dbname=ledger"), null);
  assert.throws(() => hostsOf("postgres://h1,h2/l?target_session_attrs=standby"), /target_session_attrs=standby is not supported/);
  assert.throws(() => hostsOf("postgres://h1,,h2/l"), /an empty host/);
  assert.throws(() => new Ledger({ connectionString: "postgres://h1,h2/l?target_session_attrs=read-only", requestedBy: "t" }), RangeError);
});

/** A port on 127.0.0.1 nothing listens on. */
async function deadPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** `url` with its host list replaced by `hosts` and its database by `database`. */
function withHosts(url: string, hosts: string, database: string): string {
  const parsed = new URL(url);
  const userinfo = parsed.username ? `${parsed.username}${parsed.password ? `:${parsed.password}` : ""}@` : "";
  return `postgres://${userinfo}${hosts}/${database}?target_session_attrs=read-write`;
}

test("the pool passes over a host that does not answer and one that answers read-only, and follows the one that takes writes", async () => {
  const server = new URL(databaseUrl());
  const live = `${server.hostname}:${server.port || 5432}`;
  const database = `effectwatch_hosts_${unique()}`;
  // The login makes databases: the one test command made the suite's own with it.
  await sql(`create database ${database}`);
  const dead = `127.0.0.1:${await deadPort()}`;
  const url = withHosts(databaseUrl(), `${dead},${live}`, database);
  const pool = new PrimaryPool(hostsOf(url)!, { max: 2 });
  const asAdmin = async (on: string, statement: string) => {
    const admin = new pg.Client({ connectionString: on });
    await admin.connect();
    try {
      await admin.query(statement);
    } finally {
      await admin.end();
    }
  };
  const own = hostsOf(url)!.urls[1]!;
  try {
    await asAdmin(own, "create table written (n int)");
    await pool.query("insert into written values (1)", []);
    assert.equal(pool.server, live, "the dead host first in the list is passed over");

    // The server now answers read-only, as a demoted primary does, and its
    // connections are dropped: the write fails, and so does the search
    // after it, naming each host and why it was passed over.
    await asAdmin(databaseUrl(), `alter database ${database} set default_transaction_read_only = on`);
    await asAdmin(databaseUrl(), `select pg_terminate_backend(pid) from pg_stat_activity where datname = '${database}' and pid <> pg_backend_pid()`);
    let last: unknown;
    for (let tries = 0; tries < 3; tries++) {
      await assert.rejects(
        pool.query("insert into written values (2)", []).catch((error: unknown) => {
          last = error;
          throw error;
        }),
      );
    }
    assert.ok(last instanceof NotPrimary, String(last));
    assert.match(last.message, new RegExp(`^no primary among the hosts \\(${dead}: .*; ${live} is a standby\\)$`));

    // It takes writes again: after the pause, the pool finds it.
    await asAdmin(databaseUrl(), `alter database ${database} reset default_transaction_read_only`);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await pool.query("insert into written values (3)", []);
    const rows = await pool.query<{ n: number }>("select n from written order by n", []);
    assert.deepEqual(rows.rows.map((row) => row.n), [1, 3]);
    assert.equal(pool.switches, 0, "the same host all along");
  } finally {
    await pool.end();
    await asAdmin(databaseUrl(), `drop database if exists ${database} with (force)`);
  }
});

test("a Ledger on a URL of several hosts writes to the one that takes writes", async () => {
  const server = new URL(databaseUrl());
  const database = server.pathname.slice(1);
  const url = withHosts(databaseUrl(), `127.0.0.1:${await deadPort()},${server.hostname}:${server.port || 5432}`, database);
  const ledger = new Ledger({ connectionString: url, requestedBy: "hosts-test" });
  try {
    const key = `refund:hosts-${unique()}:v1`;
    const intent = { opKey: key, action: "refund", target: `invoice:${key}`, params: { n: 1 }, amountMinor: 100, currency: "EUR" };
    const value = await ledger.effect(intent, async (effect) => {
      await effect.dispatched();
      return effect.succeeded("re_1", { id: "re_1" });
    });
    assert.deepEqual(value, { id: "re_1" });
    const [row] = await sql<{ state: string }>("select state::text from ledger.effects where op_key = $1", [key]);
    assert.equal(row?.state, "succeeded");
  } finally {
    await ledger.close();
  }
});
