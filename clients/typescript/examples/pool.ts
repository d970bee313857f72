// A ledger on a pg.Pool of your own: it takes a connection from the pool
// for each statement and gives it back, and leaves the pool open. Run it
// with DATABASE_URL naming a ledger: node dist/examples/pool.js
import pg from "pg";
import { Ledger } from "effectwatch";
import { payments } from "./payments.js";

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL!, max: 4 });
pool.on("error", (error) => console.error(`an idle connection failed: ${error.message}`));
// Each call is a transaction of its own that sets the statement timeout first (default 10 s).
const ledger = new Ledger({ pool, requestedBy: "refund-agent", statementTimeoutMs: 5_000 });

const refund = ledger.wrap(
  { action: "refund", opKey: "refund:{invoice}", target: "invoice:{invoice}", amountMinor: "amount_minor", currency: "currency" },
  (args: { invoice: string; amount_minor: number; currency: string }, { opKey }) =>
    payments.refund(args.invoice, args.amount_minor, args.currency, { idempotencyKey: opKey }),
);

const first = await refund({ invoice: "INV-310", amount_minor: 900, currency: "EUR" });
const again = await refund({ invoice: "INV-310", amount_minor: 900, currency: "EUR" });
console.log(`refunded ${first.id}; asked again, got ${again.id}`);
console.log(`the provider was called ${payments.calls} time(s)`);
await ledger.close(); // the pool is yours: still open
const { rows } = await pool.query<{ open: number }>("select 1 as open");
console.log(`the ledger is closed, the pool still answers: ${rows[0]!.open}`);
await pool.end();
