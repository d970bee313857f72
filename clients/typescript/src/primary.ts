// A ledger on several servers, one of them the primary (Patroni, say): the
// URL lists every host as libpq does,
// `postgres://user@h1:5432,h2:5432,h3:5432/ledger?target_session_attrs=read-write`.
// node-postgres parses neither the list nor target_session_attrs, so the
// pool follows the primary itself, as the Rust ledger pool does: it looks
// for the host that takes writes (`show transaction_read_only` is `off`),
// in the order given, and keeps a pool on it until an error says the
// primary may have moved (the connection lost, the server shutting down or
// answering read-only); the next statement looks again.

import pg from "pg";

/** What the Ledger sends its statements through: a pg.Pool, or a PrimaryPool. */
export interface Statements {
  query<Row extends pg.QueryResultRow>(sql: string, values: unknown[]): Promise<pg.QueryResult<Row>>;
  end(): Promise<void>;
}

/** Which of several servers the pool wants, as libpq's `target_session_attrs`. */
export type Wanted = "primary" | "any";

/** A URL as one URL per host, in the order given, and which of them to use. */
export interface Hosts {
  urls: string[];
  wanted: Wanted;
}

/**
 * The hosts of a libpq-style URL, or null for a URL node-postgres takes as
 * it is (one host, no target_session_attrs). Several hosts want the
 * primary unless `target_session_attrs=any` says otherwise;
 * `target_session_attrs` itself is taken out of each host's URL. Throws
 * RangeError for a value other than read-write, primary or any.
 */
export function hostsOf(url: string): Hosts | null {
  const scheme = /^(postgres(?:ql)?):\/\//i.exec(url);
  if (scheme === null) return null;
  const rest = url.slice(scheme[0].length);
  const authorityEnd = rest.search(/[/?]/);
  const authority = authorityEnd < 0 ? rest : rest.slice(0, authorityEnd);
  const tail = authorityEnd < 0 ? "" : rest.slice(authorityEnd);
  const at = authority.lastIndexOf("@");
  const userinfo = authority.slice(0, at + 1);
  const hosts = authority.slice(at + 1).split(",");
  const question = tail.indexOf("?");
  const path = question < 0 ? tail : tail.slice(0, question);
  let attrs: string | null = null;
  const kept = (question < 0 ? "" : tail.slice(question + 1)).split("&").filter((pair) => {
    if (pair.startsWith("target_session_attrs=")) {
      attrs = decodeURIComponent(pair.slice("target_session_attrs=".length));
      return false;
    }
    return pair !== "";
  });
  if (hosts.length === 1 && attrs === null) return null;
  if (hosts.length > 1 && hosts.some((host) => host === "")) {
    throw new RangeError("an empty host in the connection string's list of hosts");
  }
  let wanted: Wanted;
  if (attrs === "any") wanted = "any";
  else if (attrs === null || attrs === "read-write" || attrs === "primary") wanted = "primary";
  else throw new RangeError(`target_session_attrs=${String(attrs)} is not supported: use read-write (the primary) or any`);
  const suffix = path + (kept.length > 0 ? `?${kept.join("&")}` : "");
  return { urls: hosts.map((host) => `${scheme[1]}://${userinfo}${host}${suffix}`), wanted };
}

/** `host:port` of a one-host URL, without credentials. */
function serverOf(url: string): string {
  const authority = url.replace(/^[^:]+:\/\//, "").split(/[/?]/)[0] ?? "";
  return authority.slice(authority.lastIndexOf("@") + 1) || "localhost";
}

/** No host takes writes now, or the one in use stopped taking them: nothing was carried out, and the call may be sent again. */
export class NotPrimary extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "NotPrimary";
  }
}

/** After a search that found no primary, callers are told so for this long rather than each searching again. */
const SEARCH_PAUSE_MS = 1_000;
/** How long the search waits for one host to answer, unless the pool's own connectionTimeoutMillis says. */
const PROBE_TIMEOUT_MS = 5_000;

/** An error after which the primary may be elsewhere. */
function mayMeanMoved(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const { code, severity } = error as { code?: unknown; severity?: unknown };
  if (error instanceof pg.DatabaseError || typeof severity === "string") {
    return typeof code === "string" && (code.startsWith("08") || ["25006", "57P01", "57P02", "57P03"].includes(code));
  }
  // Anything else is the connection's: a socket error, a timeout, the connection ended.
  return true;
}

function firstLine(error: unknown): string {
  const text = (error instanceof Error ? error.message : String(error)).trim();
  return text.split("\n")[0] || (error instanceof Error ? error.name : typeof error);
}

/**
 * A pool on whichever of `hosts` is wanted (the primary, for read-write),
 * found again after an error that may mean it moved. Statements are sent
 * as to a pg.Pool; a statement the server refused as read-only throws
 * NotPrimary, as does a search that found no primary.
 */
export class PrimaryPool implements Statements {
  private pool: pg.Pool | null = null;
  private url: string | null = null;
  private suspect = true;
  private searching: Promise<pg.Pool> | null = null;
  private failed: { at: number; message: string } | null = null;
  /** How many times the pool moved to another host. */
  switches = 0;

  constructor(
    private readonly hosts: Hosts,
    private readonly config: pg.PoolConfig,
  ) {}

  /** `host:port` of the server in use, or null before the first statement. */
  get server(): string | null {
    return this.url === null ? null : serverOf(this.url);
  }

  async query<Row extends pg.QueryResultRow>(sql: string, values: unknown[]): Promise<pg.QueryResult<Row>> {
    const pool = await this.ready();
    try {
      return await pool.query<Row>(sql, values);
    } catch (error) {
      if (pool === this.pool && mayMeanMoved(error)) this.suspect = true;
      if ((error as { code?: unknown }).code === "25006") {
        throw new NotPrimary(`${this.server} no longer takes writes: ${firstLine(error)}`, { cause: error });
      }
      throw error;
    }
  }

  async end(): Promise<void> {
    const pool = this.pool;
    this.pool = null;
    await pool?.end();
  }

  private async ready(): Promise<pg.Pool> {
    if (!this.suspect && this.pool !== null) return this.pool;
    if (this.searching === null) {
      // A fresh error each time: an error object carries what its own call did.
      if (this.failed !== null && performance.now() - this.failed.at < SEARCH_PAUSE_MS) throw new NotPrimary(this.failed.message);
      this.searching = this.search().finally(() => (this.searching = null));
    }
    return this.searching;
  }

  private async search(): Promise<pg.Pool> {
    const passedOver: string[] = [];
    for (const url of this.hosts.urls) {
      const probe = new pg.Client({
        connectionString: url,
        application_name: this.config.application_name,
        connectionTimeoutMillis: this.config.connectionTimeoutMillis || PROBE_TIMEOUT_MS,
        query_timeout: this.config.connectionTimeoutMillis || PROBE_TIMEOUT_MS,
      });
      probe.on("error", () => {});
      try {
        await probe.connect();
        if (this.hosts.wanted === "primary") {
          const { rows } = await probe.query<{ transaction_read_only: string }>("show transaction_read_only");
          if (rows[0]?.transaction_read_only !== "off") {
            passedOver.push(`${serverOf(url)} is a standby`);
            continue;
          }
        }
        this.failed = null;
        this.suspect = false;
        return this.use(url);
      } catch (error) {
        passedOver.push(`${serverOf(url)}: ${firstLine(error)}`);
      } finally {
        probe.end().catch(() => {});
      }
    }
    const message = `no ${this.hosts.wanted === "primary" ? "primary" : "server"} among the hosts (${passedOver.join("; ")})`;
    this.failed = { at: performance.now(), message };
    throw new NotPrimary(message);
  }

  private use(url: string): pg.Pool {
    if (this.pool !== null && url === this.url) return this.pool;
    const before = this.pool;
    this.pool = new pg.Pool({ ...this.config, connectionString: url });
    // An idle connection the server dropped: the pool removes it.
    this.pool.on("error", () => {});
    if (before !== null) {
      this.switches += 1;
      // Calls still holding the old pool finish, or fail, on their own.
      before.end().catch(() => {});
    }
    this.url = url;
    return this.pool;
  }
}
