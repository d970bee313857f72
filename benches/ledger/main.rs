//! The ledger benchmark: `cargo bench --bench ledger`.
//!
//! 1. **Writer throughput**: `begin_effect` + `complete_effect(succeeded)` (two round trips, a
//!    new key each) over N concurrent connections, against a bare table of the same shape written
//!    with `INSERT … ON CONFLICT DO NOTHING` + `UPDATE` (also two round trips). Baseline and
//!    ledger rounds alternate (ABBA…), each round is reported, with begin latency percentiles.
//!    The same comparison driven by pgbench (a minimal client: no client work beside the
//!    calls), in the simple and the prepared protocol (`pgbench_bench`).
//! 2. **Pane views vs ledger size**: a small ledger and a large one with the same open items,
//!    built only through the writer API (server-side, `generate_series` batches), then each pane
//!    is timed as the console reads it (`panes::fetch`, top rows) and with `count(*)`, and its
//!    plan on both ledgers is captured with `EXPLAIN (ANALYZE, BUFFERS)` (through auto_explain,
//!    so it is the plan of the very statement `panes::fetch` sends).
//!
//! 3. **Reconciler**: a backlog of unknown effects settled by 1, 2 and 4 reconcilers at once
//!    against the fake provider (`reconciler_bench`).
//! 4. **Retention**: the time to drop a month of history, on a ledger whose aged history sits
//!    in month partitions, against the same prune deleting it row by row on a ledger built
//!    alike whose history sits in the kept partitions; with the begin latency of a writer
//!    running beside it and the database size before and after (`retention_bench`).
//! 5. **Heartbeats**: 1,000 calls in flight beating: a beat's latency, and the writer alone
//!    against the writer beside the beats at their real rate (`heartbeat_bench`).
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
//! query, `EW_BENCH_WARMUPS` [3], `EW_BENCH_LIMIT` [500] rows per pane fetch, `EW_BENCH_RECONCILE` [10000] unknown
//! effects for the reconciler, `EW_BENCH_RETAIN` [200000] settled effects per retention ledger,
//! `EW_BENCH_ONLY` [all] `writer` (with pgbench), `pgbench`, `panes`, `reconciler`, `retention` or
//! `heartbeats`,
//! `EW_BENCH_KEEP` [unset] set to 1: keep the ledgers built (with `DATABASE_URL`) to inspect them.
//!
//! Results go to stdout; progress goes to stderr.

mod build;
mod config;
mod heartbeat_bench;
mod pane_bench;
mod pgbench_bench;
mod reconciler_bench;
mod retention_bench;
mod server;
mod stats;
mod writer;

use anyhow::{Context, Result, bail};
use effectwatch::ledger::panes::{self, Filter, Pane};
use effectwatch::ledger::writer::{Completion, Intent, Outcome, begin_effect, complete_effect};
use effectwatch::ledger::{ConnectSettings, Decision, connect, migrate};
use effectwatch::localpg::{ClusterOptions, LocalCluster};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) use build::*;
pub(crate) use config::*;
pub(crate) use heartbeat_bench::*;
pub(crate) use pane_bench::*;
pub(crate) use pgbench_bench::*;
pub(crate) use reconciler_bench::*;
pub(crate) use retention_bench::*;
pub(crate) use server::*;
pub(crate) use stats::*;
pub(crate) use writer::*;

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
    if config.pgbench {
        let db = BenchDb::create(server, "pgbench").await?;
        let result = pgbench_bench(config, &db).await;
        db.drop_db().await;
        println!("{}", result?);
    }
    if config.panes {
        println!("{}", panes_bench(config, server).await?);
    }
    if config.reconciler {
        println!("{}", reconciler_bench(config, server).await?);
    }
    if config.retention {
        println!("{}", retention_bench(config, server).await?);
    }
    if config.heartbeats {
        println!("{}", heartbeat_bench(config, server).await?);
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
