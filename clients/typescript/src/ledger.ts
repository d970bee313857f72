// The writer API's three SQL calls, answered as they are, and the effect
// and wrap helpers that make the right order of calls the obvious one.
// Every rule of the ledger stays in the database.

import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import {
  BadArgument,
  EffectError,
  Held,
  InFlight,
  LedgerRefused,
  NotPerformed,
  NotYours,
  Overlap,
  RateLimited,
  Rejected,
  Stop,
  UnstorableResult,
  Wait,
  type Differences,
} from "./errors.js";
import { ArgumentRules, KeyTemplate, asJson, canonicalParams, keyForm, wholeMinorUnits, type Normaliser } from "./keys.js";
import { outcomeOf } from "./outcome.js";
import { NotPrimary, PrimaryPool, hostsOf, type Statements } from "./primary.js";

// Every query is unnamed: node-postgres prepares only named queries, and a
// prepared statement does not survive PgBouncer's transaction mode.
// begin_effect and, with dispatch => true when it answers proceed or retry,
// mark_dispatched: one transaction, one round trip. A rejected call is
// answered with what differs (`differences`).
// Both claims start the call's heartbeat lease with the claim itself, in the
// same transaction, when heartbeat_lease is given (null: heartbeats off);
// make_interval of a null is null. They answer the lease in force, in ms:
// the action's policy may set another than the one asked for, and the beats
// follow the ledger's (null: no lease asked, or nothing claimed).
const BEGIN_SQL = `select decision, effect_id, state, result, dispatched, refused, differences,
    extract(epoch from lease_in_force)::float8 * 1000 as lease_in_force_ms
    from ledger.begin_and_dispatch(
    op_key => $1, action => $2, target => $3, params => $4::jsonb, requested_by => $5,
    amount_minor => $6::bigint, currency => $7, provider => $8, request_id => $9,
    worker => $10, dispatch => $11, heartbeat_lease => make_interval(secs => $12::float8))`;

const DISPATCH_SQL = `select claimed, state, refused,
    extract(epoch from lease_in_force)::float8 * 1000 as lease_in_force_ms from ledger.mark_dispatched(
    op_key => $1, request_id => $2, worker => $3, target => $4,
    heartbeat_lease => make_interval(secs => $5::float8))`;

const COMPLETE_SQL = `select applied, state, late, refused from ledger.complete_effect(
    op_key => $1, outcome => $2, external_ref => $3, result => $4::jsonb, retryable => $5,
    reason => $6, request_id => $7, worker => $8, error_class => $9,
    retry_after => make_interval(secs => $10::float8), target => $11)`;

// A beat for a provider call in progress (README, "Heartbeats"); it answers
// the lease in force, which the next beats follow.
const HEARTBEAT_SQL = `select alive, state, lease_until,
    extract(epoch from lease_in_force)::float8 * 1000 as lease_in_force_ms from ledger.heartbeat(
    op_key => $1, lease => make_interval(secs => $2::float8), worker => $3)`;

// Read only when a call's reply was lost, before it is sent again and
// after: whether its first send was carried out for this attempt. An agent
// login reads its own effects only.
const OWN_SQL = `select id, state, dispatched_at is not null as dispatched, request_id,
    owner_role = session_user::text as owned from ledger.effects where op_key = $1`;

/** An effect as a call sent again after a lost reply reads it back. */
interface Own {
  id: string;
  state: string;
  dispatched: boolean;
  request_id: string | null;
  owned: boolean;
}

/** A call whose connection is lost is sent again after each of these pauses: three more tries over about two seconds. */
const RETRY_PAUSES_MS = [200, 600, 1200];

// A completion whose connection is lost carries the provider's answer, which
// nothing else has: it is sent again for longer, up to completionRetryForMs
// from its first failure (a Patroni failover of a dead leader takes about
// 20 s), after pauses from the first of these doubling to the second.
const COMPLETION_RETRY_FOR_MS = 30_000;
const COMPLETION_FIRST_PAUSE_MS = 200;
const COMPLETION_LONGEST_PAUSE_MS = 2_000;

/**
 * When a call whose connection was lost is sent again: after each of
 * RETRY_PAUSES_MS, or for a completion (`completing`, its key) with a
 * bound, after pauses doubling from 200 ms to 2 s until `retryForMs` have
 * passed since its first failure, each said through `warn`. `pause`
 * answers undefined once no try is left (for a completion, said once).
 */
class Resends {
  private tries = 0;
  private nextMs = COMPLETION_FIRST_PAUSE_MS;
  private since: number | null = null;

  constructor(
    private readonly completing: string | null,
    private readonly retryForMs: number,
    private readonly warn: (message: string) => void,
  ) {}

  pause(error: unknown): number | undefined {
    if (this.completing === null || this.retryForMs <= 0) return RETRY_PAUSES_MS[this.tries++];
    const now = performance.now();
    this.since ??= now;
    const out = now - this.since;
    const left = this.retryForMs - out;
    if (left <= 0) {
      this.warn(
        `effectwatch: the ledger stayed out of reach for ${seconds(out)} s (completionRetryForMs): the provider's answer for ${this.completing} ` +
          `is not recorded, and the effect stays dispatched for the reconciler (${messageLine(error)})`,
      );
      return undefined;
    }
    const pause = Math.min(this.nextMs, left);
    this.nextMs = Math.min(this.nextMs * 2, COMPLETION_LONGEST_PAUSE_MS);
    this.warn(
      `effectwatch: the ledger is out of reach; keeping the provider's answer for ${this.completing} and trying again in ${seconds(pause)} s ` +
        `(out of reach for ${seconds(out)} s, of at most ${Math.round(this.retryForMs / 1000)} s: ${messageLine(error)})`,
    );
    return pause;
  }
}

function seconds(ms: number): string {
  return (ms / 1000).toFixed(1);
}

/** An error's first line, or its name when it says nothing. */
function messageLine(error: unknown): string {
  const text = (error instanceof Error ? error.message : String(error)).trim();
  const line = text.split("\n")[0] ?? "";
  if (line !== "") return line;
  return error instanceof Error ? error.name : typeof error;
}

// What node-postgres and Node's sockets say when a connection is lost.
const LOST_SOCKET_CODES = new Set(["ECONNRESET", "ECONNREFUSED", "ECONNABORTED", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN"]);
const LOST_CONNECTION = /connection terminated|terminated unexpectedly|connection error|not queryable|timeout exceeded when trying to connect/i;

/**
 * Whether a ledger call failed for its connection rather than being
 * answered: a socket error, the connection ended or unreachable, a
 * connection exception (SQLSTATE 08) or the server shutting down (57P01 to
 * 57P03). The ledger may have carried the call out. An error the ledger
 * answered — a refusal, a check, a statement it cancelled — is never sent
 * again.
 */
function connectionLost(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  // Of a URL listing several hosts: none takes writes now (a failover).
  if (error instanceof NotPrimary) return true;
  const { code, severity } = error as { code?: unknown; severity?: unknown };
  if (error instanceof pg.DatabaseError || typeof severity === "string") {
    // The server answered, with its SQLSTATE.
    return typeof code === "string" && (code.startsWith("08") || ["57P01", "57P02", "57P03"].includes(code));
  }
  if (typeof code === "string" && LOST_SOCKET_CODES.has(code)) return true;
  return LOST_CONNECTION.test(error.message);
}

/** A begin whose reply was lost began the effect for this attempt: pending, not dispatched, this login's, with its id. */
function ownBegin(own: Own | undefined, attemptId: string | null): own is Own {
  return attemptId !== null && own !== undefined && own.state === "pending" && !own.dispatched && own.owned && own.request_id === attemptId;
}

/** A dispatch whose reply was lost claimed the effect for this attempt (a claim writes its id over the begin's). */
function ownClaim(own: Own | undefined, attemptId: string | null): boolean {
  return attemptId !== null && own !== undefined && own.state === "pending" && own.dispatched && own.owned && own.request_id === attemptId;
}

/**
 * A completion whose reply was lost must not be sent again: the key carries
 * another attempt's id and that attempt has gone past its begin, so this
 * completion was recorded and the key taken again since; sent again, it
 * would settle the other attempt's call.
 */
function movedOn(own: Own | undefined, attemptId: string | null): own is Own {
  return (
    attemptId !== null &&
    own !== undefined &&
    own.request_id !== null &&
    own.request_id !== attemptId &&
    (own.dispatched || own.state !== "pending")
  );
}

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** What the agent is about to do, named by a key made from its business arguments. */
export interface Intent {
  opKey: string;
  action: string;
  target: string;
  /** Stored as canonical JSON: NaN, ±Infinity and other values JSON cannot hold are refused (BadArgument). */
  params: Record<string, unknown>;
  /** A whole number of minor units (see wholeMinorUnits): anything else is refused, never rounded. */
  amountMinor?: number | bigint | null;
  currency?: string | null;
  provider?: string | null;
  /** This attempt's id, one per attempt (never shared by two callers): `effect` makes one when it is not given (README, "A lost reply"). */
  requestId?: string | null;
}

/** What begin_effect answered. A `refused` answer (another caller's key)
 * carries no effect id and no state: both are null. */
export interface Begun {
  decision: string;
  effectId: string | null;
  state: string | null;
  result: unknown;
  /** Asked to dispatch too (`begin(intent, { dispatch: true })`): whether this call claimed the effect. */
  dispatched?: boolean;
  /** Why that claim was refused (an approval that lapsed, another login). */
  refused?: string | null;
  /** A rejected call's terms that differ, as the ledger said them: `[{ field, recorded, now }]`. */
  differences?: { field: string; recorded: unknown; now: unknown }[] | null;
  /**
   * A claim that started a lease (`{ dispatch: true, lease: true }`): the
   * lease in force, in ms — the action's policy's when it sets one, else
   * the one asked for — which the beats follow (`beatFor`). Absent: no
   * lease, or not known (a claim whose reply was lost, read back).
   */
  leaseInForceMs?: number;
}

/** begin_and_dispatch's answer, as the ledger sends it. */
interface BegunRow {
  decision: string;
  effect_id: string | null;
  state: string | null;
  result: unknown;
  dispatched: boolean | null;
  refused: string | null;
  differences: { field: string; recorded: unknown; now: unknown }[] | null;
  lease_in_force_ms?: number | null;
}

/**
 * What a begin whose reply was lost did for this attempt, from the effect
 * read back: `proceed` if it began the effect (ownBegin), and, for a begin
 * that also dispatches, `proceed` and dispatched if it claimed it too
 * (ownClaim: the one transaction committed). Null: neither, as far as the
 * row shows.
 */
function begunBefore(own: Own | undefined, attemptId: string | null, dispatch: boolean): BegunRow | null {
  if (own === undefined) return null;
  const row = { decision: "proceed", effect_id: own.id, state: "pending", result: null, refused: null, differences: null };
  if (dispatch && ownClaim(own, attemptId)) return { ...row, dispatched: true };
  if (ownBegin(own, attemptId)) return { ...row, dispatched: false };
  return null;
}

function begunOf(row: BegunRow): Begun {
  const begun: Begun = { decision: row.decision, effectId: row.effect_id, state: row.state, result: row.result };
  if (row.dispatched) begun.dispatched = true;
  if (row.refused) begun.refused = row.refused;
  if (row.differences) begun.differences = row.differences;
  if (row.lease_in_force_ms !== null && row.lease_in_force_ms !== undefined) begun.leaseInForceMs = row.lease_in_force_ms;
  return begun;
}

export interface Dispatch {
  claimed: boolean;
  state: string;
  refused: string | null;
  /** See `Begun.leaseInForceMs`: null (or absent) when no lease, or not known. */
  leaseInForceMs?: number | null;
}

/** mark_dispatched's answer, as the ledger sends it. */
interface DispatchRow {
  claimed: boolean;
  state: string;
  refused: string | null;
  lease_in_force_ms: number | null;
}

export interface Completed {
  applied: boolean;
  state: string;
  late: boolean;
  refused: string | null;
}

export interface Completion {
  externalRef?: string | null;
  result?: unknown;
  retryable?: boolean | null;
  reason?: string | null;
  errorClass?: string | null;
  /** Seconds the provider asked to wait (rate limits). */
  retryAfter?: number | null;
  requestId?: string | null;
}

/** What a heartbeat learned. */
export interface Beat {
  /** The call is still this worker's to finish; false once the effect is completed, or declared lost because an earlier lease ran out. */
  alive: boolean;
  /** The effect's state: `unknown` when not alive because it was declared lost; any other, completed meanwhile. */
  state: string;
  /** Until when the lease now runs (null when not alive). */
  leaseUntil: Date | null;
  /** The lease in force, in ms: the action's policy's when it sets one, else the one asked for (null when not alive). */
  leaseInForceMs: number | null;
}

/** The lease a call holds from its claim and from each beat, by default (README, "Heartbeats"). */
const HEARTBEAT_LEASE_MS = 15_000;
// The ledger's own bounds on a lease (ledger.heartbeat).
const SHORTEST_LEASE_MS = 1_000;
const LONGEST_LEASE_MS = 3_600_000;

export interface LedgerOptions {
  /**
   * A PostgreSQL URL, on which the ledger makes its own pool (or pass
   * `pool`: one of the two). Several hosts, as libpq writes them
   * (`postgres://u@h1:5432,h2:5432/ledger?target_session_attrs=read-write`,
   * README, "Connections and PgBouncer"), make the client follow the primary: it uses
   * the host that takes writes and looks again when an error says it moved.
   */
  connectionString?: string;
  /**
   * A node-postgres pool of yours, used as it is instead of one the ledger
   * makes (or pass `connectionString`: one of the two): its host, its
   * connections' settings and its `error` listener are yours, and
   * `close()` leaves it open. With a statement timeout (below), each call
   * is a transaction of its own that sets it first:
   * `begin; set local statement_timeout = N`, the statement, `commit`.
   */
  pool?: pg.Pool;
  /** Who asks: recorded with every attempt, and the worker that dispatches. */
  requestedBy: string;
  /** The name of the ledger's own connections (default effectwatch-typescript); a pool you pass names its own. */
  applicationName?: string;
  /**
   * Each statement's bound (default 10 s; null: none). The ledger's own
   * connections are made with it, which PgBouncer refuses as a startup
   * parameter: behind PgBouncer pass null and set statement_timeout on the
   * login role instead (ALTER ROLE ... SET statement_timeout), or pass a
   * pool. On a pool you pass it is set in each call's own transaction
   * (`set local`), which PgBouncer takes, leaving your connections' own
   * timeout as it was.
   */
  statementTimeoutMs?: number | null;
  /** Connections kept by the ledger's own pool (default 10); each is held for one statement only. A pool you pass has its own size. */
  maxConnections?: number;
  /**
   * The lease a provider call in progress holds, from 1000 (1 s) to
   * 3600000 (1 h): started by its claim (in the same statement) and moved by
   * a beat every third of it, the first a third of a lease after the claim,
   * so a shorter call sends none. A worker that dies mid-call is unknown
   * (worker_lost) once its lease runs out. Default 15000; null: no lease and
   * no heartbeats (README, "Heartbeats").
   */
  heartbeatLeaseMs?: number | null;
  /**
   * How long a completion — which carries the provider's answer, which
   * nothing else has — is sent again while the ledger is out of reach (its
   * connection lost or refused, as in a failover), from its first failure,
   * after pauses from 200 ms doubling to 2 s, each said through onWarning.
   * Default 30000; 0: three more tries over about two seconds, as any other
   * call (README, "A lost reply").
   */
  completionRetryForMs?: number;
  /**
   * Told what the client cannot throw into the call: a heartbeat that
   * failed, or that found its call lost; a completion sent again while the
   * ledger is out of reach, or given up. Default console.warn.
   */
  onWarning?: (message: string) => void;
}

const MAY_RUN = new Set(["proceed", "retry"]);

/** Each statement's bound unless told otherwise (LedgerOptions.statementTimeoutMs). */
const STATEMENT_TIMEOUT_MS = 10_000;

/**
 * A pool of the caller's (LedgerOptions.pool), used as it is: one host,
 * its connections as the caller made them, never ended by the ledger. Every
 * statement is unnamed, so never prepared. With a statement timeout, each
 * statement is a transaction of its own that sets it first, in one round
 * trip with its BEGIN (`set local`: the connection keeps its own timeout,
 * and PgBouncer's transaction mode takes it), then the statement, then
 * COMMIT; a connection whose ROLLBACK fails after an error is dropped
 * from the pool. Without one, a statement is the pool's `query`.
 */
class CallersPool implements Statements {
  private readonly begin: string | null;

  constructor(
    private readonly pool: pg.Pool,
    statementTimeoutMs: number | null,
  ) {
    this.begin = statementTimeoutMs === null ? null : `begin; set local statement_timeout = ${statementTimeoutMs}`;
  }

  async query<Row extends pg.QueryResultRow>(sql: string, values: unknown[]): Promise<pg.QueryResult<Row>> {
    if (this.begin === null) return this.pool.query<Row>(sql, values);
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query(this.begin);
      const answer = await client.query<Row>(sql, values);
      await client.query("commit");
      return answer;
    } catch (error) {
      try {
        await client.query("rollback");
      } catch (lost) {
        broken = lost instanceof Error ? lost : new Error(String(lost));
      }
      throw error;
    } finally {
      client.release(broken);
    }
  }

  async end(): Promise<void> {}
}

/**
 * A writer of the effect ledger. Each call is one statement, its own short
 * transaction, on a pooled connection released before the provider is
 * called — of the pool the ledger makes on its connectionString, or of the
 * pg.Pool you pass (`pool`), used as it is; statements are never prepared,
 * so the ledger may sit behind PgBouncer in transaction mode. A call whose connection is lost is sent
 * again, a few times; a call sent again recognises what its first send did
 * for the same request id (README, "A lost reply"). A completion, which
 * carries the provider's answer, is sent again with backoff for up to
 * `completionRetryForMs` (0: as any other call), each try said through
 * `onWarning`.
 */
export class Ledger {
  readonly requestedBy: string;
  /** The lease a call in progress holds from its claim and each beat, or null: no heartbeats. */
  readonly heartbeatLeaseMs: number | null;
  /** How long a completion is sent again while the ledger is out of reach (0: a few tries, as any other call). */
  readonly completionRetryForMs: number;
  private readonly warn: (message: string) => void;
  private readonly pool: Statements;
  /**
   * Whether a wrapped call begins and claims its effect in one round trip
   * (false: begin, then dispatch, two, as before begin_and_dispatch; the
   * bench compares them).
   */
  private oneRoundTrip = true;

  constructor(options: LedgerOptions) {
    const lease = options.heartbeatLeaseMs === undefined ? HEARTBEAT_LEASE_MS : options.heartbeatLeaseMs;
    if (lease !== null && !(lease >= SHORTEST_LEASE_MS && lease <= LONGEST_LEASE_MS)) {
      throw new RangeError(`heartbeatLeaseMs is from ${SHORTEST_LEASE_MS} (1 s) to ${LONGEST_LEASE_MS} (1 h), or null for no heartbeats, not ${lease}`);
    }
    const retryFor = options.completionRetryForMs ?? COMPLETION_RETRY_FOR_MS;
    if (!(typeof retryFor === "number" && retryFor >= 0)) {
      throw new RangeError(`completionRetryForMs is milliseconds, 0 or more (0: a few tries over about two seconds), not ${String(retryFor)}`);
    }
    this.requestedBy = options.requestedBy;
    this.heartbeatLeaseMs = lease;
    this.completionRetryForMs = retryFor;
    this.warn = options.onWarning ?? ((message) => console.warn(message));
    const timeout = options.statementTimeoutMs === undefined ? STATEMENT_TIMEOUT_MS : options.statementTimeoutMs;
    if (timeout !== null && !(Number.isInteger(timeout) && timeout >= 0)) {
      throw new RangeError(`statementTimeoutMs is whole milliseconds, 0 or more, or null for none, not ${String(timeout)}`);
    }
    if ((options.connectionString === undefined) === (options.pool === undefined)) {
      throw new TypeError("a Ledger is made on a connectionString or on a pool (pool: a pg.Pool of yours): one of the two");
    }
    if (options.pool !== undefined) {
      if (options.applicationName !== undefined || options.maxConnections !== undefined) {
        throw new TypeError("applicationName and maxConnections are for the pool a Ledger makes on a connectionString: set them on the pool you pass");
      }
      this.pool = new CallersPool(options.pool, timeout);
      return;
    }
    const config: pg.PoolConfig = {
      application_name: options.applicationName ?? "effectwatch-typescript",
      ...(timeout === null ? {} : { statement_timeout: timeout }),
      max: options.maxConnections ?? 10,
    };
    // Several hosts (`h1:5432,h2:5432`) or target_session_attrs, which
    // node-postgres does not know: a pool that follows the primary.
    const connectionString = options.connectionString!;
    const hosts = hostsOf(connectionString);
    if (hosts !== null) {
      this.pool = new PrimaryPool(hosts, config);
    } else {
      const pool = new pg.Pool({ ...config, connectionString });
      // An idle connection the server or the network dropped (a failover, a
      // restart): the pool removes it, and the next call opens another. Left
      // unheard, the pool's error event would end the process.
      pool.on("error", () => {});
      this.pool = pool;
    }
  }

  /** Ends the pool the ledger made; a pool you passed is yours to end, and stays open. */
  async close(): Promise<void> {
    await this.pool.end();
  }

  /**
   * Runs one statement, sent again when its connection is lost
   * (connectionLost) — the pool drops that connection — and never when the
   * ledger answered an error. Answers the row and whether it was sent
   * again: a lost reply may hide a call the ledger carried out. Before
   * sending it again, `instead` may answer a row in its place. A
   * completion (`completing`, its key) is sent again for longer
   * (completionRetryForMs, see Resends).
   */
  private async call<Row extends pg.QueryResultRow>(
    sql: string,
    values: unknown[],
    instead?: () => Promise<Row | null>,
    completing: string | null = null,
  ): Promise<{ row: Row | undefined; again: boolean }> {
    const resends = new Resends(completing, this.completionRetryForMs, this.warn);
    for (let again = false; ; again = true) {
      try {
        if (again && instead !== undefined) {
          const answered = await instead();
          if (answered !== null) return { row: answered, again };
        }
        const answer = await this.pool.query<Row>(sql, values);
        return { row: answer.rows[0], again };
      } catch (error) {
        if (!connectionLost(error)) throw error;
        const pause = resends.pause(error);
        if (pause === undefined) throw error;
        await sleep(pause);
      }
    }
  }

  private async one<Row extends pg.QueryResultRow>(
    sql: string,
    values: unknown[],
    instead?: () => Promise<Row | null>,
    completing: string | null = null,
  ): Promise<{ row: Row; again: boolean }> {
    const { row, again } = await this.call<Row>(sql, values, instead, completing);
    if (row === undefined) throw new Error("the ledger answered no row");
    return { row, again };
  }

  private async own(opKey: string): Promise<Own | undefined> {
    return (await this.call<Own>(OWN_SQL, [opKey])).row;
  }

  // The three SQL calls, answered as they are; a call sent again after its
  // reply was lost recognises what its first send did for the same request
  // id (README, "A lost reply").

  /**
   * begin_effect and, with `dispatch` when it answers proceed or retry,
   * mark_dispatched, in one round trip (`Begun.dispatched`: this call
   * claimed the effect). Refuses params or an amount the ledger cannot hold
   * (BadArgument) before anything is written. With `lease` (and heartbeats
   * on), a claim starts the call's lease: the caller then beats for it
   * (`beatFor`) until its completion.
   */
  async begin(intent: Intent, { dispatch = false, lease = false }: { dispatch?: boolean; lease?: boolean } = {}): Promise<Begun> {
    const params = canonicalParams(intent.params);
    const attemptId = intent.requestId ?? null;
    const sentBefore = async (): Promise<BegunRow | null> =>
      begunBefore((await this.pool.query<Own>(OWN_SQL, [intent.opKey])).rows[0], attemptId, dispatch);
    const { row, again } = await this.one<BegunRow>(
      BEGIN_SQL,
      [
        intent.opKey,
        intent.action,
        intent.target,
        params,
        this.requestedBy,
        amountOf(intent),
        intent.currency ?? null,
        intent.provider ?? null,
        attemptId,
        this.requestedBy,
        dispatch,
        lease ? this.leaseSeconds() : null,
      ],
      sentBefore,
    );
    if (again && row.decision === "in_flight") {
      // The first send may have committed after the read: in flight, by
      // this attempt's own begin (and claim).
      const before = begunBefore(await this.own(intent.opKey), attemptId, dispatch);
      if (before !== null) return begunOf(before);
    }
    return begunOf(row);
  }

  /**
   * Claims the effect for its provider call. With `lease` (and heartbeats
   * on), the claim starts the call's lease: the caller then beats for it
   * (`beatFor`) until its completion.
   */
  async markDispatched(
    opKey: string,
    target: string,
    requestId: string | null = null,
    { lease = false }: { lease?: boolean } = {},
  ): Promise<Dispatch> {
    // A claim read back after its reply was lost does not say the lease in force.
    const claimedBefore = async (): Promise<DispatchRow | null> => {
      const own = (await this.pool.query<Own>(OWN_SQL, [opKey])).rows[0];
      return ownClaim(own, requestId) ? { claimed: true, state: "pending", refused: null, lease_in_force_ms: null } : null;
    };
    const { row, again } = await this.one<DispatchRow>(
      DISPATCH_SQL,
      [opKey, requestId, this.requestedBy, target, lease ? this.leaseSeconds() : null],
      claimedBefore,
    );
    if (again && !row.claimed && !row.refused && ownClaim(await this.own(opKey), requestId)) {
      return { claimed: true, state: "pending", refused: null, leaseInForceMs: null };
    }
    return { claimed: row.claimed, state: row.state, refused: row.refused, leaseInForceMs: row.lease_in_force_ms };
  }

  /** Refuses a result JSON cannot hold (TypeError) before anything is written. */
  async complete(opKey: string, target: string, outcome: string, fields: Completion = {}): Promise<Completed> {
    const unstorable = unstorablePart(fields.result, "result");
    if (unstorable !== null) throw new TypeError(`${opKey}: the result holds ${unstorable}, which the ledger cannot store; nothing was written`);
    const attemptId = fields.requestId ?? null;
    const recordedAndMovedOn = async (): Promise<Completed | null> => {
      const own = (await this.pool.query<Own>(OWN_SQL, [opKey])).rows[0];
      return movedOn(own, attemptId) ? { applied: false, state: own.state, late: false, refused: null } : null;
    };
    const { row } = await this.one<Completed>(
      COMPLETE_SQL,
      [
        opKey,
        outcome,
        fields.externalRef ?? null,
        fields.result === undefined || fields.result === null ? null : JSON.stringify(fields.result),
        fields.retryable ?? null,
        fields.reason ?? null,
        attemptId,
        this.requestedBy,
        fields.errorClass ?? null,
        fields.retryAfter ?? null,
        target,
      ],
      recordedAndMovedOn,
      opKey,
    );
    return row;
  }

  /**
   * One beat: the worker running `opKey`'s provider call is alive, and its
   * lease runs `leaseMs` from now, or the lease the action's policy sets,
   * which the answer says (`Beat.leaseInForceMs`). Never sent again on a
   * lost connection: the next beat is its retry.
   */
  async heartbeat(opKey: string, leaseMs: number): Promise<Beat> {
    const [row] = (
      await this.pool.query<{ alive: boolean; state: string; lease_until: Date | null; lease_in_force_ms: number | null }>(HEARTBEAT_SQL, [
        opKey,
        leaseMs / 1000,
        this.requestedBy,
      ])
    ).rows;
    if (row === undefined) throw new Error("the ledger answered no row");
    return { alive: row.alive, state: row.state, leaseUntil: row.lease_until, leaseInForceMs: row.lease_in_force_ms ?? null };
  }

  /**
   * Heartbeats for `opKey`'s provider call, claimed just now (its claim
   * started the lease), until they are stopped: one every third of the
   * lease in force, the first a third of it from now. `leaseInForceMs` is
   * the lease in force its claim answered (`Begun.leaseInForceMs`,
   * `Dispatch.leaseInForceMs`: the action's policy may set one); not given,
   * `heartbeatLeaseMs`; null, not known (a claim read back after its reply
   * was lost): the first beat goes at once, and its answer tells it. From
   * each beat on, the beats follow the lease in force it is answered. Null
   * when heartbeats are off.
   */
  beatFor(opKey: string, leaseInForceMs?: number | null): Heartbeats | null {
    if (this.heartbeatLeaseMs === null) return null;
    if (leaseInForceMs === null) return new Heartbeats(this, opKey, this.heartbeatLeaseMs, this.warn, 0);
    return new Heartbeats(this, opKey, leaseInForceMs ?? this.heartbeatLeaseMs, this.warn);
  }

  /** The lease a claim starts, in seconds, or null: heartbeats off. */
  private leaseSeconds(): number | null {
    return this.heartbeatLeaseMs === null ? null : this.heartbeatLeaseMs / 1000;
  }

  /** The error for a decision that forbids calling the provider. */
  async refusalFor(begun: Begun, intent: Intent): Promise<EffectError> {
    return refusalFor(begun, intent);
  }

  // The primitive and the wrapper.

  /**
   * Begins the effect. `proceed` and `retry` run `body`, which calls
   * `e.dispatched()` just before the provider and returns
   * `e.succeeded(externalRef, result)`; `replay` returns the stored result
   * without running it; any other decision throws its error.
   */
  async effect<T>(intent: Intent, body: (effect: Effect) => Promise<T>): Promise<T> {
    return this.run(intent, body, false);
  }

  /**
   * `effect`; with `claim`, for a body whose first act is `dispatched()`,
   * the begin claims the effect in the same round trip and that call takes
   * the claim it made.
   */
  private async run<T>(intent: Intent, body: (effect: Effect) => Promise<T>, claim: boolean): Promise<T> {
    // This attempt's id, sent with its begin, dispatch and completion.
    const attemptId = intent.requestId || randomUUID();
    let begun: Begun;
    try {
      begun = await this.begin({ ...intent, requestId: attemptId }, { dispatch: claim, lease: claim });
    } catch (error) {
      throw noted(error, { intent, dispatched: false, recorded: null });
    }
    if (begun.decision === "replay") return begun.result as T;
    if (!MAY_RUN.has(begun.decision)) throw await this.refusalFor(begun, intent);
    const claimed: Dispatch | null =
      claim && (begun.dispatched || begun.refused)
        ? {
            claimed: begun.dispatched ?? false,
            state: begun.state ?? "",
            refused: begun.refused ?? null,
            leaseInForceMs: begun.leaseInForceMs ?? null,
          }
        : null;
    const effect = new Effect(this, intent, attemptId, claimed);
    let value: T;
    try {
      value = await body(effect);
    } catch (error) {
      try {
        await effect.recordThrown(error);
      } catch (recording) {
        throw noted(recording, effect.aftermath());
      }
      throw noted(error, effect.aftermath());
    }
    try {
      await effect.recordReturned();
    } catch (recording) {
      throw noted(recording, effect.aftermath());
    }
    return value;
  }

  /**
   * Wraps a provider call whose key and target come from its business
   * arguments — never from a random or per-turn id, which makes every retry
   * a new action. Write them as templates (`"refund:{order_id}:{amount_minor}"`,
   * see KeyTemplate); `normalise` names the normalisers per argument,
   * `amountMinor` and `currency` the arguments that hold them. Everything —
   * key, target, amount, params and `call` itself — gets the call's
   * canonical arguments (ArgumentRules), so the provider is sent what the
   * ledger recorded. An argument no key can be made from is refused
   * (BadArgument) before the ledger is written. The result must be JSON: a
   * replay returns it as stored.
   */
  wrap<A extends Record<string, unknown>, R>(
    spec: WrapSpec<A, R>,
    call: (args: A, intent: Intent) => Promise<R>,
  ): (args: A) => Promise<R> {
    const rules = new ArgumentRules(spec.normalise, typeof spec.amountMinor === "string" ? spec.amountMinor : null);
    const opKeyOf = keyMaker<A>(`${spec.action} opKey`, spec.opKey);
    const targetOf = keyMaker<A>(`${spec.action} target`, spec.target);
    const amountMinor = spec.amountMinor;
    const currency = spec.currency;
    const intentOf = (args: A): [A, Intent] => {
      // The canonical arguments keep every member, only changed in value.
      const canonical = rules.canonical(args) as A;
      return [
        canonical,
        {
          opKey: opKeyOf(canonical),
          action: spec.action,
          target: targetOf(canonical),
          params: spec.params ? spec.params(canonical) : canonical,
          amountMinor: typeof amountMinor === "string" ? ((canonical[amountMinor] as number | bigint | undefined) ?? null) : (amountMinor?.(canonical) ?? null),
          currency: typeof currency === "string" ? currencyCode(canonical[currency], currency) : (currency?.(canonical) ?? null),
          provider: spec.provider ?? null,
        },
      ];
    };
    return async (args: A) => {
      let made: [A, Intent];
      try {
        made = intentOf(args);
      } catch (error) {
        throw noted(error, { intent: null, dispatched: false, recorded: null });
      }
      const [canonical, intent] = made;
      return this.run(intent, async (effect) => {
        await effect.dispatched();
        const value = await call(canonical, intent);
        return effect.succeeded(spec.externalRef?.(value) ?? null, value);
      }, this.oneRoundTrip);
    };
  }
}

// An argument's name, checked against the arguments the call takes rather
// than read as a hint of what they are.
type ArgumentName<A> = keyof NoInfer<A> & string;

export interface WrapSpec<A, R> {
  action: string;
  /**
   * A template filled from the call's canonical arguments:
   * `"refund:{order_id}:{amount_minor}"`. A function of the arguments is
   * still accepted, but it is how keys like "[object Object]" or "1e+21"
   * are made.
   */
  opKey: string | ((args: A) => string);
  /** A template like opKey (`"invoice:{order_id}"`), or a function. */
  target: string | ((args: A) => string);
  /** Normalisers per argument, applied in order to strings: `{ order_id: ["trim", "upper"] }`. */
  normalise?: { [argument in ArgumentName<A>]?: readonly Normaliser[] };
  /** The params to store, when not the canonical arguments. */
  params?: (args: A) => Record<string, unknown>;
  /** The argument holding the amount in minor units (it must be an integer), or a function. */
  amountMinor?: ArgumentName<A> | ((args: A) => number | bigint | null);
  /** The argument holding the currency code, or a function (`() => "EUR"` for a fixed one). */
  currency?: ArgumentName<A> | ((args: A) => string | null);
  provider?: string;
  externalRef?: (value: R) => string | null;
}

function keyMaker<A extends Record<string, unknown>>(role: string, form: string | ((args: A) => string)): (canonical: A) => string {
  if (typeof form === "string") {
    const template = KeyTemplate.parse(role, form);
    return (canonical) => template.fill(canonical);
  }
  return (canonical) => {
    const made = form(canonical);
    if (typeof made !== "string" || made.trim() === "") {
      throw new TypeError(`${role} gave no key: build it from the call's business arguments`);
    }
    return made;
  };
}

// Optional, like the amount: the ledger checks the code itself.
function currencyCode(value: unknown, argument: string): string | null {
  if (value === undefined || value === null || typeof value === "string") return value ?? null;
  throw new BadArgument(argument, `is ${keyForm(value, argument)}, not a currency code`, `Send ${argument} as an ISO 4217 code such as "EUR".`);
}

function amountOf(intent: Intent): number | bigint | null {
  return intent.amountMinor === undefined || intent.amountMinor === null ? null : wholeMinorUnits(intent.amountMinor, "amountMinor");
}

/**
 * Where a value holds what JSON.stringify cannot write faithfully — NaN and
 * ±Infinity (it writes null), a bigint (it throws) — or null if nowhere.
 */
function unstorablePart(value: unknown, path: string): string | null {
  const json = asJson(value);
  if (typeof json === "number") return Number.isFinite(json) ? null : `${json} at ${path}`;
  if (typeof json === "bigint") return `a bigint at ${path}`;
  if (typeof json !== "object" || json === null) return null;
  for (const [name, member] of Object.entries(json)) {
    const found = unstorablePart(member, Array.isArray(json) ? `${path}[${name}]` : `${path}.${name}`);
    if (found !== null) return found;
  }
  return null;
}

/**
 * Where a call through `Ledger.effect` or a wrapped function stood when it
 * threw something other than an EffectError (read it with `aftermathOf`):
 * whether the provider may have been called, and what this caller recorded.
 */
export interface Aftermath {
  /** The effect, or null when the call failed before its key was made. */
  intent: Intent | null;
  /** dispatched() claimed the effect: from then on the provider may have acted. */
  dispatched: boolean;
  /** What this caller recorded, or null if nothing: never begun, or the ledger out of reach. */
  recorded: Recorded | null;
}

/** An outcome this caller recorded with complete_effect. */
export interface Recorded {
  outcome: string;
  retryable: boolean | null;
  errorClass: string | null;
  reason: string | null;
  retryAfter: number | null;
}

const aftermaths = new WeakMap<object, Aftermath>();

/**
 * What the ledger holds after `error` was thrown by `Ledger.effect` or a
 * wrapped function, or undefined for an EffectError (its decision says it)
 * or anything thrown elsewhere.
 */
export function aftermathOf(error: unknown): Aftermath | undefined {
  return typeof error === "object" && error !== null ? aftermaths.get(error) : undefined;
}

// The first note is the truest: an error rethrown through a nested effect
// keeps what the innermost call recorded.
function noted(error: unknown, aftermath: Aftermath): unknown {
  if (typeof error === "object" && error !== null && !(error instanceof EffectError) && !aftermaths.has(error)) {
    aftermaths.set(error, aftermath);
  }
  return error;
}

/**
 * The beats of one provider call in progress, whose claim started its
 * lease: one every third of the lease, the first a third of a lease after
 * the claim — a call shorter than that sends none — so that the lease
 * outlasts one lost beat, not two in a row. Each is one statement on the
 * pool. None keeps
 * the process alive, none is sent while another waits for its answer, and
 * none throws into the call: a failed beat is said and tried again at the
 * next tick. A beat told the call is no longer in flight is the last: it
 * says so once if the ledger declared the call lost (unknown), and nothing
 * if the call was completed meanwhile. The lease is the lease in force, as
 * the claim answered it (the action's policy may set it), then as each beat
 * answers it: a beat answered another is followed from the next beat.
 */
export class Heartbeats {
  private timer: NodeJS.Timeout | null;
  private inFlight: Promise<void> | null = null;
  private stopped = false;
  /** When the next tick is due (performance.now()). */
  private due: number;

  constructor(
    private readonly ledger: Ledger,
    private readonly opKey: string,
    private leaseMs: number,
    private readonly warn: (message: string) => void,
    /** When the first beat is due; by default a third of the lease from now. */
    firstInMs: number = leaseMs / 3,
  ) {
    this.due = performance.now() + firstInMs;
    this.timer = setTimeout(() => this.beat(), firstInMs).unref();
  }

  /** Stops the beats; resolves once none is left in flight. */
  async stop(): Promise<void> {
    this.halt();
    await this.inFlight;
  }

  private halt(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  /** The tick after `due`, a third of the lease on, ticks already past skipped. */
  private next(): void {
    if (this.stopped) return;
    if (this.timer !== null) clearTimeout(this.timer);
    const now = performance.now();
    do this.due += this.leaseMs / 3;
    while (this.due <= now);
    this.timer = setTimeout(() => this.beat(), this.due - now).unref();
  }

  private beat(): void {
    this.timer = null;
    const tick = this.due;
    this.next();
    if (this.inFlight !== null) return;
    this.inFlight = this.ledger
      .heartbeat(this.opKey, this.leaseMs)
      .then(
        (beat) => {
          if (beat.alive) {
            if (beat.leaseInForceMs !== null && beat.leaseInForceMs !== this.leaseMs) {
              // Another lease in force (the action's policy changed): the
              // next tick a third of it after this one's.
              this.leaseMs = beat.leaseInForceMs;
              this.due = tick;
              this.next();
            }
            return;
          }
          this.halt();
          // Completed meanwhile (by this call racing its beat, or by an
          // operator): nothing to say.
          if (beat.state !== "unknown") return;
          this.warn(
            `effectwatch: the ledger declared this call lost (${this.opKey} is ${beat.state}, no longer in flight): ` +
              "heartbeats stop; its answer will still be recorded",
          );
        },
        (error: unknown) => {
          this.warn(`effectwatch: a heartbeat for ${this.opKey} failed (${describe(error)}); the next is due in ${Math.round(this.leaseMs / 3)} ms`);
        },
      )
      .finally(() => {
        this.inFlight = null;
      });
  }
}

/** One effect in progress (see Ledger.effect). */
export class Effect {
  private isDispatched = false;
  private heartbeats: Heartbeats | null = null;
  private isClosedForThisCaller = false;
  /** A completion of this caller's was given up with the ledger out of reach: its tries were the tries, none is sent after it. */
  private completionLost = false;
  private recordedByThisCaller: Recorded | null = null;

  constructor(
    private readonly ledger: Ledger,
    readonly intent: Intent,
    /** This attempt's id, sent with each of its calls: the intent's requestId, else one made for it. */
    readonly attemptId: string = intent.requestId || randomUUID(),
    /** The claim the begin made in the same round trip, taken by the first dispatched(). */
    private claimedWithBegin: Dispatch | null = null,
  ) {}

  /** Call it just before the provider call: claims the effect. Anything thrown after it records unknown. */
  async dispatched(): Promise<void> {
    const dispatch =
      this.claimedWithBegin ??
      (await this.ledger.markDispatched(this.intent.opKey, this.intent.target, this.attemptId, { lease: true }));
    this.claimedWithBegin = null;
    if (dispatch.refused || !dispatch.claimed) {
      // Not ours to settle: another caller holds the dispatch, or the ledger
      // already decided (an approval that lapsed cancels the effect).
      // Recording a failure here would close someone else's call.
      this.isClosedForThisCaller = true;
      if (dispatch.refused) throw new LedgerRefused(dispatch.refused);
      throw new InFlight(this.intent.opKey, dispatch.state);
    }
    this.isDispatched = true;
    // From here until its answer is recorded the provider call is in
    // progress; its claim answered the lease in force the beats go by (not
    // known for a claim read back after its reply was lost: the first beat,
    // sent at once, tells it).
    this.heartbeats ??= this.ledger.beatFor(this.intent.opKey, dispatch.leaseInForceMs ?? null);
  }

  /**
   * Records the provider's confirmation and gives back `result`, which a
   * replay will return. A result JSON cannot hold throws UnstorableResult.
   */
  async succeeded<T>(externalRef: string | null, result: T): Promise<T> {
    const unstorable = unstorablePart(result, "result");
    if (unstorable !== null) {
      // The provider has acted, so failed would be false; and a result with
      // the bad numbers replaced would be replayed as an answer the provider
      // never gave. Unknown, with the reference and the reason, is what is
      // known: someone must look, and meanwhile nobody calls it again.
      await this.complete("unknown", { externalRef, reason: `result not storable: ${unstorable}` });
      throw new UnstorableResult(this.intent.opKey, externalRef, unstorable);
    }
    await this.complete("succeeded", { externalRef, result });
    return result;
  }

  async recordThrown(error: unknown): Promise<void> {
    if (this.isClosedForThisCaller || this.completionLost) return;
    if (!this.isDispatched && !(error instanceof NotPerformed) && !(error instanceof RateLimited)) {
      // The provider was never called: the same key may run again once the
      // cause is fixed (cancelled would close the key for good).
      await this.complete("failed", { retryable: true, reason: `not dispatched: ${describe(error)}` });
      return;
    }
    const seen = outcomeOf(error);
    await this.complete(seen.outcome, {
      errorClass: seen.errorClass,
      retryable: seen.retryable,
      reason: seen.reason,
      retryAfter: seen.retryAfter,
    });
  }

  async recordReturned(): Promise<void> {
    if (this.isClosedForThisCaller || this.completionLost) return;
    if (this.isDispatched) {
      await this.complete("unknown", { reason: "the body returned without succeeded()" });
    } else {
      await this.complete("failed", { retryable: true, reason: "not dispatched: the body returned first" });
    }
  }

  /** Whether the provider may have been called, and what this caller recorded so far. */
  aftermath(): Aftermath {
    return { intent: this.intent, dispatched: this.isDispatched, recorded: this.recordedByThisCaller };
  }

  private async complete(outcome: string, fields: Completion): Promise<Completed> {
    // A beat after the completion would be told the call is lost.
    await this.heartbeats?.stop();
    let completed: Completed;
    try {
      completed = await this.ledger.complete(this.intent.opKey, this.intent.target, outcome, {
        ...fields,
        requestId: this.attemptId,
      });
    } catch (error) {
      // Sent again while the ledger stayed out of reach, and given up: a
      // second completion (unknown, for the error thrown) would only wait
      // as long again. The effect stays dispatched for the reconciler.
      if (connectionLost(error)) this.completionLost = true;
      throw error;
    }
    if (completed.refused) throw new LedgerRefused(completed.refused);
    this.isClosedForThisCaller = true;
    this.recordedByThisCaller = {
      outcome,
      retryable: fields.retryable ?? null,
      errorClass: fields.errorClass ?? null,
      reason: fields.reason ?? null,
      retryAfter: fields.retryAfter ?? null,
    };
    return completed;
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** The terms a rejected call changed, field by field (params by key), as the ledger said them (none when pruned). */
export function differences(begun: Begun): Differences {
  const found: Differences = {};
  for (const { field, recorded, now } of begun.differences ?? []) found[field] = { recorded, now };
  return found;
}

export function refusalFor(begun: Begun, intent: Intent): EffectError {
  const result = (typeof begun.result === "object" && begun.result !== null ? begun.result : {}) as Record<string, unknown>;
  const state = begun.state ?? "";
  switch (begun.decision) {
    case "refused":
      return new NotYours(intent.opKey);
    case "in_flight":
      return new InFlight(intent.opKey, state);
    case "held":
      return new Held(intent.opKey, state);
    case "rejected":
      return new Rejected(intent.opKey, state, differences(begun));
    case "stop":
      return new Stop(intent.opKey, state, begun.result);
    case "overlap":
      return new Overlap(intent.opKey, state, result["overlaps"]);
    case "wait":
      return new Wait(intent.opKey, state, Number(result["retry_after_seconds"] ?? 60));
    default:
      throw new Error(`the ledger answered a decision this client does not know: ${begun.decision}`);
  }
}
