//! The ledger benchmark: `cargo bench --bench ledger`.
//!
//! 1. **Writer throughput**: `begin_effect` + `complete_effect(succeeded)` (two round trips, a
//!    new key each) over N concurrent connections, against a bare table of the same shape written
//!    with `INSERT … ON CONFLICT DO NOTHING` + `UPDATE` (also two round trips). Baseline and
//!    ledger rounds alternate (ABBA…), each round is reported, with begin latency percentiles.
//! 2. **Pane views vs ledger size**: a small ledger and a large one with the same open items,
//!    built only through the writer API (server-side, `generate_series` batches), then each pane
//!    is timed as the console reads it (`panes::fetch`, top rows) and with `count(*)`, and its
//!    plan on both ledgers is captured with `EXPLAIN (ANALYZE, BUFFERS)` (through auto_explain,
//!    so it is the plan of the very statement `panes::fetch` sends).
//!
//! Server: `DATABASE_URL` if set (fresh databases `ew_bench_<pid>_*` are created on it and
//! dropped afterwards), else a private cluster started with `effectwatch::localpg` (durable
//! settings, `fast_unsafe: false`), stopped at the end — or by its watchdog if we are killed.
//!
//! Sizes come from the environment (defaults in brackets):
//! `EW_BENCH_CPU_BOUND` [unset] set to 1: the private cluster runs with `fsync=off` and no
//! synchronous commit, so the writer figures measure CPU, not the disk.
//! `EW_BENCH_EFFECTS` [1000000] large ledger, `EW_BENCH_SMALL` [20000] small ledger,
//! `EW_BENCH_OPEN` [10000] open items (a quarter each: overdue pending, unknown, held, keys with
//! duplicate attempts), `EW_BENCH_SECONDS` [10] per writer round, `EW_BENCH_ROUNDS` [2] writer
//! rounds per path, `EW_BENCH_CONNECTIONS` [8] writer connections, `EW_BENCH_BATCH` [50000] rows
//! per build statement (capped by the server's lock table, see `build_batch`),
//! `EW_BENCH_BUILD_JOBS` [cores] parallel build connections, `EW_BENCH_RUNS` [15] timed runs per
//! query, `EW_BENCH_WARMUPS` [3], `EW_BENCH_LIMIT` [500] rows per pane fetch, `EW_BENCH_ONLY`
//! [both] `writer` or `panes`.
//!
//! Results go to stdout; progress goes to stderr.

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use effectwatch::ledger::panes::{self, Filter, Pane};
use effectwatch::ledger::writer::{Completion, Intent, Outcome, begin_effect, complete_effect};
use effectwatch::ledger::{ConnectSettings, Decision, connect, migrate};
use effectwatch::localpg::{ClusterOptions, LocalCluster};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool};

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
    effects: u64,
    small: u64,
    open: u64,
    seconds: u64,
    rounds: usize,
    connections: usize,
    batch: u64,
    build_jobs: usize,
    runs: usize,
    warmups: usize,
    limit: i64,
    writer: bool,
    panes: bool,
}

fn env_num<T: FromStr>(name: &str, default: T) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .replace('_', "")
            .parse()
            .map_err(|e| anyhow::anyhow!("{name}={text:?}: {e}")),
        _ => Ok(default),
    }
}

impl Config {
    fn from_env() -> Result<Config> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let only = std::env::var("EW_BENCH_ONLY").unwrap_or_default();
        let (writer, panes) = match only.trim() {
            "" | "both" | "all" => (true, true),
            "writer" => (true, false),
            "panes" => (false, true),
            other => bail!("EW_BENCH_ONLY={other:?}: expected writer, panes or both"),
        };
        let config = Config {
            effects: env_num("EW_BENCH_EFFECTS", 1_000_000)?,
            small: env_num("EW_BENCH_SMALL", 20_000)?,
            open: env_num("EW_BENCH_OPEN", 10_000)?,
            seconds: env_num("EW_BENCH_SECONDS", 10)?,
            rounds: env_num("EW_BENCH_ROUNDS", 2)?,
            connections: env_num("EW_BENCH_CONNECTIONS", 8)?,
            batch: env_num("EW_BENCH_BATCH", 50_000)?,
            build_jobs: env_num("EW_BENCH_BUILD_JOBS", cores)?,
            runs: env_num("EW_BENCH_RUNS", 15)?,
            warmups: env_num("EW_BENCH_WARMUPS", 3)?,
            limit: env_num("EW_BENCH_LIMIT", 500)?,
            writer,
            panes,
        };
        if config.open < 4 || config.small < config.open || config.effects < config.small {
            bail!(
                "need 4 <= EW_BENCH_OPEN ({}) <= EW_BENCH_SMALL ({}) <= EW_BENCH_EFFECTS ({})",
                config.open,
                config.small,
                config.effects
            );
        }
        if config.seconds == 0
            || config.rounds == 0
            || config.connections == 0
            || config.batch == 0
            || config.build_jobs == 0
            || config.runs == 0
        {
            bail!(
                "EW_BENCH_SECONDS, _ROUNDS, _CONNECTIONS, _BATCH, _BUILD_JOBS and _RUNS must be > 0"
            );
        }
        Ok(config)
    }

    /// Items per open kind (overdue, unknown, held, duplicates).
    fn quarter(&self) -> u64 {
        self.open / 4
    }
}

// ---------------------------------------------------------------------------------------------
// Server and databases

struct Server {
    /// URL of a maintenance database on the server, to create and drop ours.
    admin_url: String,
    cluster: Option<LocalCluster>,
    origin: String,
}

impl Server {
    fn start() -> Result<Server> {
        if let Ok(url) = std::env::var("DATABASE_URL")
            && !url.trim().is_empty()
        {
            return Ok(Server {
                admin_url: url.trim().to_string(),
                cluster: None,
                origin: "DATABASE_URL".to_string(),
            });
        }
        let cpu_bound = std::env::var("EW_BENCH_CPU_BOUND").is_ok_and(|v| v.trim() == "1");
        eprintln!(
            "[setup] DATABASE_URL unset: starting a private PostgreSQL cluster ({})",
            if cpu_bound {
                "CPU-bound: fsync=off, synchronous_commit=off"
            } else {
                "durable settings"
            }
        );
        let cluster = LocalCluster::start(ClusterOptions {
            fast_unsafe: cpu_bound,
            ..Default::default()
        })
        .context("starting a local PostgreSQL cluster")?;
        // Stops the server even if this process is killed before it can drop the cluster.
        if let Err(error) = cluster.stop_when_process_exits(std::process::id()) {
            eprintln!("[setup] warning: no watchdog for the local cluster: {error}");
        }
        Ok(Server {
            admin_url: cluster.url("postgres"),
            origin: format!("private cluster on 127.0.0.1:{}", cluster.port()),
            cluster: Some(cluster),
        })
    }

    fn stop(self) {
        if let Some(cluster) = self.cluster {
            eprintln!("[setup] stopping the private cluster");
            if let Err(error) = cluster.stop() {
                eprintln!("[setup] warning: stopping the local cluster: {error}");
            }
        }
    }
}

/// `url` with its database (path) replaced, keeping credentials, host and parameters.
fn url_with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut result = format!("{}/{database}", &base[..authority_end]);
    if let Some(query) = query {
        result.push('?');
        result.push_str(query);
    }
    result
}

fn options(url: &str) -> Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url)
        .context("invalid database URL")?
        .application_name("effectwatch-bench"))
}

/// A database of ours on the server, dropped by [`BenchDb::drop_db`].
struct BenchDb {
    name: String,
    url: String,
    admin_url: String,
}

impl BenchDb {
    async fn create(server: &Server, suffix: &str) -> Result<BenchDb> {
        let name = format!("ew_bench_{}_{suffix}", std::process::id());
        let mut admin = PgConnection::connect_with(&options(&server.admin_url)?)
            .await
            .context("connecting to the server")?;
        sqlx::query(AssertSqlSafe(format!("drop database if exists \"{name}\"")))
            .execute(&mut admin)
            .await?;
        sqlx::query(AssertSqlSafe(format!("create database \"{name}\"")))
            .execute(&mut admin)
            .await
            .with_context(|| format!("creating database {name}"))?;
        admin.close().await?;
        eprintln!("[setup] created database {name}");
        Ok(BenchDb {
            url: url_with_database(&server.admin_url, &name),
            name,
            admin_url: server.admin_url.clone(),
        })
    }

    async fn pool(&self, max: u32) -> Result<PgPool> {
        Ok(PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options(&self.url)?)
            .await?)
    }

    async fn drop_db(self) {
        let result = async {
            let mut admin = PgConnection::connect_with(&options(&self.admin_url)?).await?;
            sqlx::query(AssertSqlSafe(format!(
                "drop database if exists \"{}\" with (force)",
                self.name
            )))
            .execute(&mut admin)
            .await?;
            admin.close().await?;
            anyhow::Ok(())
        }
        .await;
        match result {
            Ok(()) => eprintln!("[setup] dropped database {}", self.name),
            Err(error) => eprintln!("[setup] warning: dropping database {}: {error}", self.name),
        }
    }
}

/// Runs a statement with the simple protocol (utility statements, several statements).
async fn exec_raw(pool: &PgPool, sql: &str) -> Result<()> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
        .execute(pool)
        .await
        .with_context(|| format!("running {sql:?}"))?;
    Ok(())
}

/// A checkpoint before each writer round, so no round pays for the previous one's dirty pages.
/// Needs superuser or pg_checkpoint; skipped silently otherwise.
async fn checkpoint(pool: &PgPool) {
    let _ = sqlx::raw_sql("checkpoint").execute(pool).await;
}

// ---------------------------------------------------------------------------------------------
// Statistics and formatting

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile of sorted durations, in ms.
fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1].as_secs_f64() * 1000.0
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// 1. Writer throughput

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WritePath {
    Baseline,
    Ledger,
}

impl WritePath {
    fn name(self) -> &'static str {
        match self {
            WritePath::Baseline => "baseline",
            WritePath::Ledger => "ledger",
        }
    }
}

struct RoundResult {
    round: usize,
    path: WritePath,
    effects: u64,
    elapsed: Duration,
    /// First round trip (begin_effect, or the baseline's INSERT), sorted.
    first_latencies: Vec<Duration>,
    /// What the writers' backends were doing, sampled from pg_stat_activity: (wait, samples).
    waits: Vec<(String, u64)>,
    /// Busy CPU time of the whole machine during the round (server and writers alike).
    cpu: Duration,
}

/// Busy CPU time of the machine so far (all cores, user + system + irq), from /proc/stat.
fn machine_busy() -> Duration {
    let ticks_per_second = 100.0; // USER_HZ, the unit of /proc/stat on Linux
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return Duration::ZERO;
    };
    let busy: u64 = stat
        .lines()
        .next()
        .map(|cpu| {
            cpu.split_whitespace()
                .skip(1)
                .enumerate()
                // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
                .filter(|(index, _)| *index != 3 && *index != 4)
                .take(6)
                .filter_map(|(_, value)| value.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Duration::from_secs_f64(busy as f64 / ticks_per_second)
}

impl RoundResult {
    fn per_second(&self) -> f64 {
        self.effects as f64 / self.elapsed.as_secs_f64()
    }

    fn cpu_us_per_effect(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.effects.max(1) as f64
    }
}

/// Same columns, defaults, identity and checks as ledger.effects; a primary key and a unique
/// op_key; none of the ledger's triggers, functions, secondary or partial indexes.
const BASELINE_SCHEMA: &str = "
create schema bench_baseline;
create table bench_baseline.effects
    (like ledger.effects including defaults including identity including constraints);
alter table bench_baseline.effects add primary key (id), add unique (op_key);
";

const BASELINE_INSERT: &str = "
insert into bench_baseline.effects
    (op_key, action, target, params, params_hash, amount_minor, currency, provider,
     requested_by, state, pending_window, deadline_at)
values ($1, $2, $3, $4, encode(sha256(convert_to(($4::jsonb)::text, 'UTF8')), 'hex'), $5, $6, $7,
        $8, 'pending', interval '5 minutes', now() + interval '5 minutes')
on conflict (op_key) do nothing";

const BASELINE_UPDATE: &str = "
update bench_baseline.effects
   set state = 'succeeded', external_ref = $2, result = $3, version = version + 1,
       updated_at = now(), settled_at = now()
 where op_key = $1";

/// One writer: a connection of its own, new keys until `end`.
async fn writer_task(
    pool: PgPool,
    path: WritePath,
    tag: String,
    worker: usize,
    run_for: Duration,
    barrier: Arc<tokio::sync::Barrier>,
) -> Result<(u64, Duration, Vec<Duration>)> {
    let mut conn = pool.acquire().await?;
    barrier.wait().await;
    let start = Instant::now();
    let end = start + run_for;
    let mut done = 0u64;
    let mut latencies = Vec::with_capacity(8192);
    let requested_by = format!("bench-agent-{worker}");
    while Instant::now() < end {
        let key = format!("bench:{tag}:{worker}:{done}");
        let target = format!("invoice:{tag}-{worker}-{done}");
        let params = json!({"invoice": target, "amount_minor": 1500, "currency": "EUR"});
        let external_ref = format!("ref-{tag}-{worker}-{done}");
        let result = json!({"provider_id": external_ref});
        match path {
            WritePath::Ledger => {
                let intent = Intent {
                    op_key: key.clone(),
                    action: "refund".to_string(),
                    target,
                    params,
                    requested_by: requested_by.clone(),
                    amount_minor: Some(1500),
                    currency: Some("EUR".to_string()),
                    provider: Some("bench".to_string()),
                    ..Default::default()
                };
                let t0 = Instant::now();
                let begun = begin_effect(&mut *conn, &intent).await?;
                latencies.push(t0.elapsed());
                if begun.decision != Decision::Proceed {
                    bail!(
                        "begin_effect({key}) decided {:?}, expected proceed",
                        begun.decision
                    );
                }
                let completion = Completion {
                    external_ref: Some(external_ref),
                    result: Some(result),
                    ..Default::default()
                };
                let completed =
                    complete_effect(&mut *conn, &key, Outcome::Succeeded, &completion).await?;
                if !completed.applied {
                    bail!("complete_effect({key}) was not applied");
                }
            }
            WritePath::Baseline => {
                let t0 = Instant::now();
                let inserted = sqlx::query(BASELINE_INSERT)
                    .bind(&key)
                    .bind("refund")
                    .bind(&target)
                    .bind(&params)
                    .bind(1500i64)
                    .bind("EUR")
                    .bind("bench")
                    .bind(&requested_by)
                    .execute(&mut *conn)
                    .await?;
                latencies.push(t0.elapsed());
                let updated = sqlx::query(BASELINE_UPDATE)
                    .bind(&key)
                    .bind(&external_ref)
                    .bind(&result)
                    .execute(&mut *conn)
                    .await?;
                if inserted.rows_affected() != 1 || updated.rows_affected() != 1 {
                    bail!("baseline write of {key} did not insert and update one row");
                }
            }
        }
        done += 1;
    }
    Ok((done, start.elapsed(), latencies))
}

/// Samples the wait events of the other active backends of this database every 20 ms for
/// `run_for`: "CPU" when a backend waits on nothing (running, or in an uninstrumented wait).
async fn sample_waits(url: String, run_for: Duration) -> Result<Vec<(String, u64)>> {
    let mut conn = PgConnection::connect_with(&options(&url)?).await?;
    let end = Instant::now() + run_for;
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    while Instant::now() < end {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "select coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*)
               from pg_stat_activity
              where datname = current_database() and pid <> pg_backend_pid()
                and state = 'active' and backend_type = 'client backend'
              group by 1",
        )
        .fetch_all(&mut conn)
        .await?;
        for (wait, n) in rows {
            *counts.entry(wait).or_default() += n as u64;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = conn.close().await;
    let mut waits: Vec<(String, u64)> = counts.into_iter().collect();
    waits.sort_by_key(|w| std::cmp::Reverse(w.1));
    Ok(waits)
}

async fn writer_round(
    pool: &PgPool,
    url: &str,
    path: WritePath,
    round: usize,
    tag: &str,
    run_for: Duration,
    connections: usize,
) -> Result<RoundResult> {
    let busy_before = machine_busy();
    let sampler = tokio::spawn(sample_waits(url.to_string(), run_for));
    let barrier = Arc::new(tokio::sync::Barrier::new(connections));
    let tasks: Vec<_> = (0..connections)
        .map(|worker| {
            tokio::spawn(writer_task(
                pool.clone(),
                path,
                tag.to_string(),
                worker,
                run_for,
                barrier.clone(),
            ))
        })
        .collect();
    let mut effects = 0;
    let mut elapsed = Duration::ZERO;
    let mut first_latencies = Vec::new();
    for task in tasks {
        let (done, took, latencies) = task.await??;
        effects += done;
        elapsed = elapsed.max(took);
        first_latencies.extend(latencies);
    }
    first_latencies.sort();
    let waits = sampler.await??;
    let cpu = machine_busy().saturating_sub(busy_before);
    Ok(RoundResult {
        round,
        path,
        effects,
        elapsed,
        first_latencies,
        waits,
        cpu,
    })
}

async fn writer_bench(config: &Config, db: &BenchDb) -> Result<String> {
    let pool = db.pool(config.connections as u32).await?;
    let report = migrate::run(&pool).await?;
    eprintln!("[writer] migrations applied: {}", report.applied.join(", "));
    exec_raw(&pool, BASELINE_SCHEMA).await?;

    let run_for = Duration::from_secs(config.seconds);
    // Warm both paths (connections, prepared statements, caches); not reported.
    for path in [WritePath::Baseline, WritePath::Ledger] {
        let warm = writer_round(
            &pool,
            &db.url,
            path,
            0,
            &format!("warm-{}", path.name()),
            Duration::from_secs(1),
            config.connections,
        )
        .await?;
        eprintln!(
            "[writer] warm-up {}: {} effects in 1 s",
            path.name(),
            warm.effects
        );
    }

    let mut results = Vec::new();
    for round in 1..=config.rounds {
        // ABBA: baseline first in odd rounds, ledger first in even ones.
        let order = if round % 2 == 1 {
            [WritePath::Baseline, WritePath::Ledger]
        } else {
            [WritePath::Ledger, WritePath::Baseline]
        };
        for path in order {
            checkpoint(&pool).await;
            eprintln!(
                "[writer] round {round} {}: {} connections for {} s…",
                path.name(),
                config.connections,
                config.seconds
            );
            let result = writer_round(
                &pool,
                &db.url,
                path,
                round,
                &format!("r{round}-{}", path.name()),
                run_for,
                config.connections,
            )
            .await?;
            eprintln!(
                "[writer] round {round} {}: {} effects, {:.0}/s",
                path.name(),
                result.effects,
                result.per_second()
            );
            results.push(result);
        }
    }

    // The ledger rows are really there, settled, with their history.
    let (succeeded, events, attempts): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from ledger.effects where state = 'succeeded'),
                (select count(*) from ledger.effect_events),
                (select count(*) from ledger.attempts)",
    )
    .fetch_one(&pool)
    .await?;
    pool.close().await;

    let mut out = String::new();
    writeln!(
        out,
        "\n## Writer throughput ({} connections, {} s per round, 2 round trips per effect)\n",
        config.connections, config.seconds
    )?;
    writeln!(
        out,
        "| round | path | effects | seconds | effects/s | CPU µs/effect | 1st call p50 ms | 1st call p99 ms |"
    )?;
    writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|")?;
    for r in &results {
        writeln!(
            out,
            "| {} | {} | {} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} |",
            r.round,
            r.path.name(),
            thousands(r.effects),
            r.elapsed.as_secs_f64(),
            r.per_second(),
            r.cpu_us_per_effect(),
            percentile_ms(&r.first_latencies, 50.0),
            percentile_ms(&r.first_latencies, 99.0)
        )?;
    }
    let mean = |path: WritePath| {
        let rates: Vec<f64> = results
            .iter()
            .filter(|r| r.path == path)
            .map(RoundResult::per_second)
            .collect();
        rates.iter().sum::<f64>() / rates.len() as f64
    };
    let all_latencies = |path: WritePath| {
        let mut all: Vec<Duration> = results
            .iter()
            .filter(|r| r.path == path)
            .flat_map(|r| r.first_latencies.iter().copied())
            .collect();
        all.sort();
        all
    };
    let (baseline, ledger) = (mean(WritePath::Baseline), mean(WritePath::Ledger));
    let ratio = 100.0 * ledger / baseline;
    let ledger_lat = all_latencies(WritePath::Ledger);
    let baseline_lat = all_latencies(WritePath::Baseline);
    writeln!(out)?;
    writeln!(
        out,
        "baseline (INSERT … ON CONFLICT DO NOTHING + UPDATE): {baseline:.0} effects/s (mean of rounds)"
    )?;
    writeln!(
        out,
        "ledger   (begin_effect + complete_effect):           {ledger:.0} effects/s (mean of rounds)"
    )?;
    let cpu_per_effect = |path: WritePath| {
        let (cpu, effects) = results
            .iter()
            .filter(|r| r.path == path)
            .fold((0.0, 0u64), |(cpu, n), r| {
                (cpu + r.cpu.as_secs_f64(), n + r.effects)
            });
        cpu * 1e6 / effects.max(1) as f64
    };
    let durable = !std::env::var("EW_BENCH_CPU_BOUND").is_ok_and(|v| v.trim() == "1");
    let target = if durable { 60.0 } else { 45.0 };
    writeln!(
        out,
        "ratio ledger/baseline: {ratio:.1} % (target >= {target:.0} % {}): {}",
        if durable { "durable" } else { "CPU-bound" },
        if ratio >= target { "MET" } else { "NOT MET" }
    )?;
    writeln!(
        out,
        "machine CPU per effect: baseline {:.0} µs, ledger {:.0} µs ({:.2}×)",
        cpu_per_effect(WritePath::Baseline),
        cpu_per_effect(WritePath::Ledger),
        cpu_per_effect(WritePath::Ledger) / cpu_per_effect(WritePath::Baseline).max(1e-9)
    )?;
    writeln!(
        out,
        "begin_effect latency, all ledger rounds ({} calls): p50 {:.2} ms, p99 {:.2} ms",
        thousands(ledger_lat.len() as u64),
        percentile_ms(&ledger_lat, 50.0),
        percentile_ms(&ledger_lat, 99.0)
    )?;
    writeln!(
        out,
        "baseline INSERT latency, all baseline rounds ({} calls): p50 {:.2} ms, p99 {:.2} ms",
        thousands(baseline_lat.len() as u64),
        percentile_ms(&baseline_lat, 50.0),
        percentile_ms(&baseline_lat, 99.0)
    )?;
    for path in [WritePath::Baseline, WritePath::Ledger] {
        let mut totals: std::collections::BTreeMap<&str, u64> = Default::default();
        for r in results.iter().filter(|r| r.path == path) {
            for (wait, n) in &r.waits {
                *totals.entry(wait.as_str()).or_default() += n;
            }
        }
        let all: u64 = totals.values().sum();
        let mut totals: Vec<(&str, u64)> = totals.into_iter().collect();
        totals.sort_by_key(|t| std::cmp::Reverse(t.1));
        writeln!(
            out,
            "{} backends, sampled every 20 ms ({} samples): {}",
            path.name(),
            all,
            totals
                .iter()
                .take(6)
                .map(|(wait, n)| format!("{wait} {:.0} %", 100.0 * *n as f64 / all.max(1) as f64))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    let notify_lock: u64 = results
        .iter()
        .filter(|r| r.path == WritePath::Ledger)
        .flat_map(|r| r.waits.iter())
        .filter(|(wait, _)| wait == "Lock:object")
        .map(|(_, n)| n)
        .sum();
    let ledger_samples: u64 = results
        .iter()
        .filter(|r| r.path == WritePath::Ledger)
        .flat_map(|r| r.waits.iter())
        .map(|(_, n)| n)
        .sum();
    if notify_lock * 4 > ledger_samples {
        writeln!(
            out,
            "note: Lock:object is the database-wide lock a transaction that ran NOTIFY takes before \
             commit and keeps until its commit record is flushed: ledger.effects_history() calls \
             pg_notify for every row, so the ledger's commits are serialized (no group commit) and \
             throughput is bounded by about 1 / (2 × WAL flush time) whatever the connection count"
        )?;
    }
    writeln!(
        out,
        "ledger after the runs: {} succeeded effects, {} state events, {} attempts",
        thousands(succeeded as u64),
        thousands(events as u64),
        thousands(attempts as u64)
    )?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// 2. Building the ledgers through the writer API

/// The four actions, picked by g; an overdue effect and the one it holds share g, hence action
/// and target.
const ACTION: &str = "(array['refund', 'booking', 'message', 'webhook'])[1 + (g % 4)::int]";

fn begin_sql(key: &str, target: &str, params: &str, extra: &str, expect: &str) -> String {
    format!(
        "select count(*) from generate_series($1::bigint, $2::bigint) g,
           lateral ledger.begin_effect(
               op_key => {key}, action => {ACTION}, target => {target},
               params => {params}, requested_by => 'agent-' || (g % 7),
               amount_minor => 100 + g % 5000, currency => 'EUR',
               provider => 'prov-' || (g % 3){extra}) b
         where b.decision in ({expect})"
    )
}

fn complete_sql(key: &str, outcome: &str, extra: &str) -> String {
    format!(
        "select count(*) from generate_series($1::bigint, $2::bigint) g,
           lateral ledger.complete_effect(op_key => {key}, outcome => '{outcome}'{extra}) c
         where c.applied"
    )
}

const PARAMS: &str =
    "jsonb_build_object('ref', 'REF-' || g, 'amount_minor', 100 + g % 5000, 'currency', 'EUR')";
/// Every tenth duplicate comes back with other params: a mismatch (rejected), not a replay.
const PARAMS_DUP_AGAIN: &str = "jsonb_build_object('ref', 'REF-' || g, 'amount_minor', 100 + g % 5000 + (g % 10 = 0)::int, 'currency', 'EUR')";

/// The open items, a quarter per kind, each as the writer API makes them.
fn open_steps() -> Vec<(&'static str, String)> {
    vec![
        (
            "overdue pending (1 ms window)",
            begin_sql(
                "'ew:overdue:' || g",
                "'acct:' || g",
                PARAMS,
                ", pending_window => interval '1 millisecond'",
                "'proceed'",
            ),
        ),
        (
            "held behind the overdue ones (same target and action)",
            begin_sql("'ew:held:' || g", "'acct:' || g", PARAMS, "", "'held'"),
        ),
        (
            "unknown: begin",
            begin_sql(
                "'ew:unknown:' || g",
                "'cust:' || g",
                PARAMS,
                "",
                "'proceed'",
            ),
        ),
        (
            "unknown: complete(unknown)",
            complete_sql(
                "'ew:unknown:' || g",
                "unknown",
                ", reason => 'provider timeout after 30 s'",
            ),
        ),
        (
            "unknown: an indeterminate reconciliation each",
            "select count(*) from generate_series($1::bigint, $2::bigint) g,
               lateral ledger.record_reconciliation(
                   op_key => 'ew:unknown:' || g, expected_version => null,
                   operator => 'bench-operator', provider => 'prov-' || (g % 3),
                   finding => 'indeterminate',
                   evidence => jsonb_build_object('looked_up', 'idempotency key'),
                   duration_ms => 30000) r
             where r.state = 'unknown'"
                .to_string(),
        ),
        (
            "duplicates: begin",
            begin_sql("'ew:dup:' || g", "'order:' || g", PARAMS, "", "'proceed'"),
        ),
        (
            "duplicates: complete(succeeded)",
            complete_sql(
                "'ew:dup:' || g",
                "succeeded",
                ", external_ref => 'ref-dup-' || g",
            ),
        ),
        (
            "duplicates: begin again (replay, or mismatch for 1 in 10)",
            begin_sql(
                "'ew:dup:' || g",
                "'order:' || g",
                PARAMS_DUP_AGAIN,
                "",
                "'replay', 'rejected'",
            ),
        ),
    ]
}

fn fill_begin_sql() -> String {
    begin_sql("'ew:ok:' || g", "'invoice:' || g", PARAMS, "", "'proceed'")
}

/// One settled effect in `UNKNOWN_EVERY` went through unknown first (a timeout) and was settled
/// by a reconciliation that found it once at the provider, so the ledger carries the history and
/// reconciliations a real one has.
const UNKNOWN_EVERY: u64 = 100;

fn fill_complete_sql() -> String {
    format!(
        "select count(*) from generate_series($1::bigint, $2::bigint) g,
           lateral ledger.complete_effect(
               op_key => 'ew:ok:' || g,
               outcome => case when g % {UNKNOWN_EVERY} = 0 then 'unknown' else 'succeeded' end,
               external_ref => case when g % {UNKNOWN_EVERY} = 0 then null else 'ref-' || g end,
               result => jsonb_build_object('provider_id', 'P' || g),
               reason => case when g % {UNKNOWN_EVERY} = 0 then 'provider timeout after 30 s' end) c
         where c.applied"
    )
}

fn fill_reconcile_sql() -> String {
    format!(
        "select count(*)
           from generate_series(($1::bigint + {n} - 1) / {n} * {n}, $2::bigint, {n}) g,
           lateral ledger.record_reconciliation(
               op_key => 'ew:ok:' || g, expected_version => null, operator => 'bench-operator',
               provider => 'prov-' || (g % 3), finding => 'exists_once',
               external_refs => array['ref-' || g],
               evidence => jsonb_build_object('looked_up', 'idempotency key'), duration_ms => 120) r
         where r.state = 'succeeded'",
        n = UNKNOWN_EVERY
    )
}

/// Rows per build statement. Every begin_effect takes a transaction-scoped advisory lock on its
/// target, kept until commit, and each takes a slot of the shared lock table, which has room for
/// max_locks_per_transaction × (max_connections + max_prepared_transactions) locks: a statement
/// of 50,000 distinct targets fails with "out of shared memory" on a default server.
async fn build_batch(pool: &PgPool, wanted: u64, jobs: usize) -> Result<u64> {
    let slots: i64 = sqlx::query_scalar(
        "select current_setting('max_locks_per_transaction')::bigint
              * (current_setting('max_connections')::bigint
                 + current_setting('max_prepared_transactions')::bigint)",
    )
    .fetch_one(pool)
    .await?;
    let cap = ((slots as u64) / 2 / jobs as u64).max(100);
    if wanted > cap {
        eprintln!(
            "[build] {wanted} rows per statement would overflow the lock table ({slots} slots, {jobs} builders): using {cap}"
        );
    }
    Ok(wanted.min(cap))
}

/// Runs `sql` over g in from..=to in batches; each statement must count every row of its batch
/// (every `every`-th value of g when the statement only takes those).
async fn run_batched(
    pool: &PgPool,
    sql: &str,
    from: u64,
    to: u64,
    batch: u64,
    every: u64,
) -> Result<()> {
    let mut a = from;
    while a <= to {
        let b = (a + batch - 1).min(to);
        let counted: i64 = sqlx::query_scalar(AssertSqlSafe(sql.to_string()))
            .bind(a as i64)
            .bind(b as i64)
            .fetch_one(pool)
            .await
            .with_context(|| format!("build statement over {a}..={b}"))?;
        let expected = b / every - (a - 1) / every;
        if counted as u64 != expected {
            bail!(
                "build statement over {a}..={b} counted {counted} rows of the expected outcome, not {expected}:\n{sql}"
            );
        }
        a = b + 1;
    }
    Ok(())
}

async fn build_open(pool: &PgPool, quarter: u64, batch: u64) -> Result<()> {
    for (label, sql) in open_steps() {
        let t0 = Instant::now();
        run_batched(pool, &sql, 1, quarter, batch, 1).await?;
        eprintln!(
            "[build] open items: {label}: {quarter} in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Settled filler effects g in from..=to (begin + complete succeeded), `jobs` statements at once.
async fn build_filler(pool: &PgPool, from: u64, to: u64, batch: u64, jobs: usize) -> Result<()> {
    if from > to {
        return Ok(());
    }
    let total = to - from + 1;
    let next = Arc::new(AtomicU64::new(from));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let begin = Arc::new(fill_begin_sql());
    let complete = Arc::new(fill_complete_sql());
    let reconcile = Arc::new(fill_reconcile_sql());
    let workers: Vec<_> = (0..jobs)
        .map(|_| {
            let (pool, next, done) = (pool.clone(), next.clone(), done.clone());
            let (begin, complete, reconcile) = (begin.clone(), complete.clone(), reconcile.clone());
            tokio::spawn(async move {
                loop {
                    let a = next.fetch_add(batch, Ordering::SeqCst);
                    if a > to {
                        return anyhow::Ok(());
                    }
                    let b = (a + batch - 1).min(to);
                    run_batched(&pool, &begin, a, b, batch, 1).await?;
                    run_batched(&pool, &complete, a, b, batch, 1).await?;
                    run_batched(&pool, &reconcile, a, b, batch, UNKNOWN_EVERY).await?;
                    done.fetch_add(b - a + 1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let progress = {
        let done = done.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let n = done.load(Ordering::SeqCst);
                let secs = start.elapsed().as_secs_f64();
                let rate = n as f64 / secs;
                let eta = if rate > 0.0 {
                    (total - n) as f64 / rate
                } else {
                    f64::NAN
                };
                eprintln!(
                    "[build] settled effects: {}/{} ({:.0}/s, eta {:.0} s)",
                    thousands(n),
                    thousands(total),
                    rate,
                    eta
                );
            }
        })
    };
    let mut outcome = Ok(());
    for worker in workers {
        if let Err(error) = worker.await? {
            outcome = Err(error);
        }
    }
    progress.abort();
    outcome?;
    eprintln!(
        "[build] settled effects: {} in {:.1} s ({:.0}/s)",
        thousands(total),
        start.elapsed().as_secs_f64(),
        total as f64 / start.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn vacuum_analyze(pool: &PgPool) -> Result<()> {
    let t0 = Instant::now();
    exec_raw(pool, "vacuum analyze").await?;
    eprintln!(
        "[build] vacuum analyze: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2. Measuring the panes

struct PaneTiming {
    fetch_ms: f64,
    fetch_rows: usize,
    count_ms: f64,
    count: i64,
}

struct Measurement {
    effects: i64,
    attempts: i64,
    events: i64,
    panes: Vec<(Pane, PaneTiming)>,
    pane_counts_ms: f64,
}

async fn measure(pool: &PgPool, config: &Config, label: &str) -> Result<Measurement> {
    let (effects, attempts, events): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from ledger.effects), (select count(*) from ledger.attempts),
                (select count(*) from ledger.effect_events)",
    )
    .fetch_one(pool)
    .await?;
    let mut panes_out = Vec::new();
    for pane in Pane::ALL {
        let mut fetch_times = Vec::new();
        let mut fetch_rows = 0;
        for run in 0..config.warmups + config.runs {
            let t0 = Instant::now();
            let rows = panes::fetch(pool, pane, &Filter::default(), config.limit, 0).await?;
            let took = ms(t0.elapsed());
            if run >= config.warmups {
                fetch_times.push(took);
            }
            fetch_rows = rows.len();
        }
        let count_sql = format!("select count(*) from {}", pane.view());
        let mut count_times = Vec::new();
        let mut count = 0;
        for run in 0..config.warmups + config.runs {
            let t0 = Instant::now();
            count = sqlx::query_scalar::<_, i64>(AssertSqlSafe(count_sql.clone()))
                .fetch_one(pool)
                .await?;
            let took = ms(t0.elapsed());
            if run >= config.warmups {
                count_times.push(took);
            }
        }
        let timing = PaneTiming {
            fetch_ms: median(&mut fetch_times),
            fetch_rows,
            count_ms: median(&mut count_times),
            count,
        };
        eprintln!(
            "[panes] {label} {}: fetch {:.2} ms ({} rows), count {:.2} ms ({})",
            pane.name(),
            timing.fetch_ms,
            timing.fetch_rows,
            timing.count_ms,
            timing.count
        );
        panes_out.push((pane, timing));
    }
    let mut counts_times = Vec::new();
    for run in 0..config.warmups + config.runs {
        let t0 = Instant::now();
        panes::counts(pool).await?;
        if run >= config.warmups {
            counts_times.push(ms(t0.elapsed()));
        }
    }
    Ok(Measurement {
        effects,
        attempts,
        events,
        panes: panes_out,
        pane_counts_ms: median(&mut counts_times),
    })
}

/// The partial indexes that serve each pane: their predicate is the view's filter.
/// (`attempts_duplicate_at_idx`, added for reports, has the same predicate as
/// `attempts_duplicate_idx`, ordered by time.)
fn expected_indexes(pane: Pane) -> &'static [&'static str] {
    match pane {
        Pane::Overdue => &["effects_pending_deadline_idx"],
        Pane::Unknown => &["effects_unknown_idx"],
        Pane::Duplicates => &["attempts_duplicate_idx", "attempts_duplicate_at_idx"],
        Pane::Held => &["effects_held_idx"],
    }
}

fn uses_any(plan: &str, indexes: &[&str]) -> bool {
    plan.lines().any(|line| {
        indexes
            .iter()
            .any(|index| line.split_whitespace().any(|word| word == *index))
    })
}

struct Plans {
    /// Per pane: plan of the panes::fetch statement, plan of count(*).
    panes: Vec<(Pane, String, String)>,
    /// Ledger tables of 10,000 rows or more: a sequential scan of one grows with the ledger.
    big_tables: Vec<String>,
}

/// Shared buffers touched by the whole statement (the top node's "Buffers:" line).
fn top_buffers(plan: &str) -> Option<u64> {
    let line = plan
        .lines()
        .find(|l| l.trim_start().starts_with("Buffers:"))?;
    let mut total = 0;
    for kind in ["hit=", "read="] {
        if let Some(at) = line.find(kind) {
            let digits: String = line[at + kind.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            total += digits.parse::<u64>().unwrap_or(0);
        }
    }
    Some(total)
}

/// Sequential scans of big tables in a plan (what makes a pane grow with the ledger).
fn big_seq_scans(plan: &str, big_tables: &[String]) -> Vec<String> {
    let mut found: Vec<String> = plan
        .lines()
        .filter_map(|line| {
            let at = line.find("Seq Scan on ")?;
            let table = line[at + 12..].split_whitespace().next()?;
            let table = table.strip_prefix("ledger.").unwrap_or(table);
            big_tables
                .iter()
                .any(|t| t == table)
                .then(|| table.to_string())
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

fn indexes_used(plan: &str) -> Vec<String> {
    let mut found: Vec<String> = plan
        .lines()
        .filter_map(|line| {
            let at = line.find(" using ").or_else(|| {
                line.find("Bitmap Index Scan on ")
                    .map(|i| i + "Bitmap Index Scan on ".len() - " using ".len())
            })?;
            line[at + 7..].split_whitespace().next().map(str::to_string)
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

/// Captures `EXPLAIN (ANALYZE, BUFFERS)` of the statement `panes::fetch` sends, through
/// auto_explain (needs superuser to LOAD), and of `count(*)` on each view.
async fn explain(db: &BenchDb, limit: i64) -> Result<Plans> {
    let mut conn = PgConnection::connect_with(&options(&db.url)?).await?;
    let auto_explain = sqlx::raw_sql(
        "load 'auto_explain';
         set auto_explain.log_min_duration = 0;
         set auto_explain.log_analyze = on;
         set auto_explain.log_buffers = on;
         set auto_explain.log_timing = on;
         set auto_explain.log_level = notice;
         set client_min_messages = notice;",
    )
    .execute(&mut conn)
    .await;
    if let Err(error) = &auto_explain {
        eprintln!("[panes] auto_explain unavailable ({error}): fetch plans skipped");
    }
    let mut plans = Vec::new();
    for pane in Pane::ALL {
        let mut fetch_plan = String::from("(auto_explain unavailable)");
        if auto_explain.is_ok() {
            take_notices();
            panes::fetch(&mut conn, pane, &Filter::default(), limit, 0).await?;
            // The plan is logged when the portal closes; one more round trip makes sure it is in.
            sqlx::query("select 1").execute(&mut conn).await?;
            fetch_plan = take_notices()
                .into_iter()
                .filter(|n| n.contains(pane.view()))
                .map(|n| {
                    n.lines()
                        .skip_while(|l| !l.starts_with("Query Text:"))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .collect::<Vec<_>>()
                .join("\n");
        }
        let rows: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
            "explain (analyze, buffers) select count(*) from {}",
            pane.view()
        )))
        .fetch_all(&mut conn)
        .await?;
        plans.push((pane, fetch_plan, rows.join("\n")));
    }
    let big_tables: Vec<String> = sqlx::query_scalar(
        "select c.relname::text from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger' and c.relkind = 'r' and c.reltuples >= 10000
          order by 1",
    )
    .fetch_all(&mut conn)
    .await?;
    let _ = conn.close().await;
    Ok(Plans {
        panes: plans,
        big_tables,
    })
}

// auto_explain's plans arrive as NOTICE messages, which sqlx hands to `tracing` under the
// target `sqlx::postgres::notice`; this layer keeps them (and only them).
static NOTICES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn take_notices() -> Vec<String> {
    std::mem::take(&mut *NOTICES.lock().unwrap_or_else(|e| e.into_inner()))
}

struct NoticeCapture;

struct MessageVisitor(String);

impl tracing::field::Visit for MessageVisitor {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoticeCapture {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut visitor = MessageVisitor(String::new());
        event.record(&mut visitor);
        NOTICES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(visitor.0);
    }
}

fn install_notice_capture() {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let only_notices = tracing_subscriber::filter::Targets::new()
        .with_target("sqlx::postgres::notice", tracing::Level::TRACE);
    let subscriber = tracing_subscriber::registry().with(NoticeCapture.with_filter(only_notices));
    let _ = tracing::subscriber::set_global_default(subscriber);
}

struct Ledger {
    measurement: Measurement,
    plans: Plans,
    build: Duration,
}

/// Builds a ledger of `total` effects in a database of its own — the settled ones first, then
/// the open items, so these are the newest rows as in production (open items are recent; an
/// old row id range would flatter any plan that walks the primary key) — then measures it and
/// drops the database.
async fn build_and_measure(
    config: &Config,
    server: &Server,
    label: &str,
    total: u64,
) -> Result<Ledger> {
    let db = BenchDb::create(server, &format!("panes_{label}")).await?;
    let result = async {
        let jobs = config.build_jobs;
        let build = db.pool(jobs as u32).await?;
        let report = migrate::run(&build).await?;
        eprintln!("[panes] {label}: migrations applied: {}", report.applied.join(", "));
        let batch = build_batch(&build, config.batch, jobs).await?;
        let quarter = config.quarter();
        eprintln!(
            "[build] {label}: {} effects ({} settled, then {} open items; {batch} rows per statement, {jobs} builders)",
            thousands(total),
            thousands(total - 4 * quarter),
            thousands(4 * quarter)
        );
        let t_build = Instant::now();
        build_filler(&build, 1, total - 4 * quarter, batch, jobs).await?;
        build_open(&build, quarter, batch).await?;
        vacuum_analyze(&build).await?;
        let built = t_build.elapsed();
        build.close().await;

        // Read as the console reads: its own pool (application name, statement timeout).
        let console = connect(&ConnectSettings::new(db.url.clone())).await?;
        let measurement = measure(&console, config, label).await?;
        console.close().await;
        let plans = explain(&db, config.limit).await?;
        anyhow::Ok(Ledger {
            measurement,
            plans,
            build: built,
        })
    }
    .await;
    db.drop_db().await;
    result
}

async fn panes_bench(config: &Config, server: &Server) -> Result<String> {
    let quarter = config.quarter();
    let open = 4 * quarter;
    let small_ledger = build_and_measure(config, server, "small", config.small).await?;
    let large_ledger = build_and_measure(config, server, "large", config.effects).await?;
    let (small, small_plans, small_build) = (
        &small_ledger.measurement,
        &small_ledger.plans,
        small_ledger.build,
    );
    let (large, large_plans, grow) = (
        &large_ledger.measurement,
        &large_ledger.plans,
        large_ledger.build,
    );

    let mut out = String::new();
    writeln!(
        out,
        "\n## Pane views vs ledger size (median of {} runs after {} warm-ups; fetch = panes::fetch top {})\n",
        config.runs, config.warmups, config.limit
    )?;
    writeln!(
        out,
        "small ledger: {} effects, {} attempts, {} events (built in {:.0} s); large: {} effects, {} attempts, {} events (built in {:.0} s); open items: {} ({} per pane), the newest rows of each ledger\n",
        thousands(small.effects as u64),
        thousands(small.attempts as u64),
        thousands(small.events as u64),
        small_build.as_secs_f64(),
        thousands(large.effects as u64),
        thousands(large.attempts as u64),
        thousands(large.events as u64),
        grow.as_secs_f64(),
        thousands(open),
        thousands(quarter)
    )?;
    writeln!(
        out,
        "| view | query | small ms | large ms | ratio | rows small/large | buffers small/large |"
    )?;
    writeln!(out, "|---|---|---:|---:|---:|---|---|")?;
    let mut problems = Vec::new();
    for ((pane, s), (_, l)) in small.panes.iter().zip(&large.panes) {
        let plan_of = |plans: &Plans, fetch: bool| {
            plans
                .panes
                .iter()
                .find(|(p, _, _)| p == pane)
                .map(|(_, f, c)| if fetch { f.clone() } else { c.clone() })
                .unwrap_or_default()
        };
        let buffers = |fetch: bool| {
            let show = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
            format!(
                "{}/{}",
                show(top_buffers(&plan_of(small_plans, fetch))),
                show(top_buffers(&plan_of(large_plans, fetch)))
            )
        };
        for (fetch, query, sm, lm, sr, lr) in [
            (
                true,
                "fetch",
                s.fetch_ms,
                l.fetch_ms,
                s.fetch_rows as i64,
                l.fetch_rows as i64,
            ),
            (false, "count(*)", s.count_ms, l.count_ms, s.count, l.count),
        ] {
            let ratio = lm / sm;
            writeln!(
                out,
                "| {} | {query} | {sm:.2} | {lm:.2} | {ratio:.2}× | {sr}/{lr} | {} |",
                pane.view(),
                buffers(fetch)
            )?;
            if ratio > 2.0 {
                problems.push(format!(
                    "{} {query}: large/small = {ratio:.2}× (> 2×)",
                    pane.view()
                ));
            }
        }
        let expected_rows = (quarter as i64).min(config.limit);
        if s.fetch_rows as i64 != expected_rows
            || l.fetch_rows as i64 != expected_rows
            || s.count != quarter as i64
            || l.count != quarter as i64
        {
            problems.push(format!(
                "{}: expected {quarter} items ({expected_rows} fetched), saw counts {}/{} and fetches {}/{}",
                pane.view(),
                s.count,
                l.count,
                s.fetch_rows,
                l.fetch_rows
            ));
        }
    }
    writeln!(
        out,
        "| ledger.pane_counts | panes::counts | {:.2} | {:.2} | {:.2}× | | |",
        small.pane_counts_ms,
        large.pane_counts_ms,
        large.pane_counts_ms / small.pane_counts_ms
    )?;

    writeln!(out, "\n### Plans on the large ledger\n")?;
    writeln!(
        out,
        "| view | expected partial index | used by fetch | used by count | seq scans of big tables (fetch / count) | indexes used by fetch |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|")?;
    for (pane, fetch, count) in &large_plans.panes {
        let indexes = expected_indexes(*pane);
        let index = indexes.join(" or ");
        let (in_fetch, in_count) = (uses_any(fetch, indexes), uses_any(count, indexes));
        let (seq_fetch, seq_count) = (
            big_seq_scans(fetch, &large_plans.big_tables),
            big_seq_scans(count, &large_plans.big_tables),
        );
        writeln!(
            out,
            "| {} | {index} | {} | {} | {} / {} | {} |",
            pane.view(),
            if in_fetch { "yes" } else { "NO" },
            if in_count { "yes" } else { "NO" },
            if seq_fetch.is_empty() {
                "none".to_string()
            } else {
                seq_fetch.join(", ")
            },
            if seq_count.is_empty() {
                "none".to_string()
            } else {
                seq_count.join(", ")
            },
            indexes_used(fetch).join(", ")
        )?;
        if !in_fetch || !seq_fetch.is_empty() {
            problems.push(format!(
                "{} fetch: {}{}",
                pane.view(),
                if in_fetch {
                    String::new()
                } else {
                    format!("{index} not used; ")
                },
                if seq_fetch.is_empty() {
                    String::new()
                } else {
                    format!("seq scan of {}", seq_fetch.join(", "))
                }
            ));
        }
    }
    writeln!(out)?;
    if problems.is_empty() {
        writeln!(out, "problems: none")?;
    } else {
        writeln!(out, "problems:")?;
        for problem in &problems {
            writeln!(out, "- {problem}")?;
        }
    }
    for (pane, fetch, count) in &large_plans.panes {
        writeln!(
            out,
            "\n#### {} on the large ledger: panes::fetch\n```\n{fetch}\n```",
            pane.view()
        )?;
        writeln!(out, "count(*):\n```\n{count}\n```")?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------

async fn run(config: &Config, server: &Server) -> Result<()> {
    let mut admin = PgConnection::connect_with(&options(&server.admin_url)?)
        .await
        .context("connecting to the server")?;
    let version: String = sqlx::query_scalar("select version()")
        .fetch_one(&mut admin)
        .await?;
    let settings: Vec<(String, String)> = sqlx::query_as(
        "select name, setting || coalesce(unit, '') from pg_settings
          where name in ('shared_buffers', 'synchronous_commit', 'fsync', 'max_connections',
                         'max_locks_per_transaction', 'work_mem')
          order by name",
    )
    .fetch_all(&mut admin)
    .await?;
    admin.close().await?;
    println!("# effectwatch ledger benchmark");
    println!(
        "server: {} ({}); cores: {}",
        version,
        server.origin,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "settings: {}",
        settings
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    if config.writer {
        let db = BenchDb::create(server, "writer").await?;
        let result = writer_bench(config, &db).await;
        db.drop_db().await;
        println!("{}", result?);
    }
    if config.panes {
        println!("{}", panes_bench(config, server).await?);
    }
    Ok(())
}

fn main() -> Result<()> {
    // `cargo bench` passes `--bench` (and maybe a filter); there is nothing to select.
    let config = Config::from_env()?;
    install_notice_capture();
    let started = Instant::now();
    let server = Server::start()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(run(&config, &server));
    drop(runtime);
    server.stop();
    eprintln!("[done] {:.0} s", started.elapsed().as_secs_f64());
    outcome
}
