//! Configuration from the environment.

#[allow(unused_imports)]
use super::*;

pub(crate) struct Config {
    pub(crate) effects: u64,
    pub(crate) small: u64,
    pub(crate) open: u64,
    pub(crate) seconds: u64,
    pub(crate) rounds: usize,
    pub(crate) connections: usize,
    pub(crate) batch: u64,
    pub(crate) build_jobs: usize,
    pub(crate) runs: usize,
    pub(crate) warmups: usize,
    pub(crate) limit: i64,
    pub(crate) reconcile: u64,
    pub(crate) retain: u64,
    /// Effects written after the aged months in the retention bench's larger ledger (0: none,
    /// and the baseline is the same history deleted row by row).
    pub(crate) retain_recent: u64,
    /// The size of the ledger the writer at size is compared with.
    pub(crate) writer_reference: u64,
    pub(crate) writer: bool,
    /// The writer comparison again, driven by pgbench.
    pub(crate) pgbench: bool,
    pub(crate) panes: bool,
    pub(crate) reconciler: bool,
    pub(crate) retention: bool,
    pub(crate) heartbeats: bool,
}

pub(crate) fn env_num<T: FromStr>(name: &str, default: T) -> Result<T>
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
    pub(crate) fn from_env() -> Result<Config> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let only = std::env::var("EW_BENCH_ONLY").unwrap_or_default();
        let (writer, pgbench, panes, reconciler, retention, heartbeats) = match only.trim() {
            "" | "both" | "all" => (true, true, true, true, true, true),
            "writer" => (true, true, false, false, false, false),
            "pgbench" => (false, true, false, false, false, false),
            "panes" => (false, false, true, false, false, false),
            "reconciler" => (false, false, false, true, false, false),
            "retention" => (false, false, false, false, true, false),
            "heartbeats" => (false, false, false, false, false, true),
            other => bail!(
                "EW_BENCH_ONLY={other:?}: expected writer, pgbench, panes, reconciler, retention, heartbeats or all"
            ),
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
            reconcile: env_num("EW_BENCH_RECONCILE", 10_000)?,
            retain: env_num("EW_BENCH_RETAIN", 200_000)?,
            retain_recent: env_num("EW_BENCH_RETAIN_RECENT", 0)?,
            writer_reference: env_num("EW_BENCH_WRITER_REFERENCE", 20_000)?,
            writer,
            pgbench,
            panes,
            reconciler,
            retention,
            heartbeats,
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
            || config.reconcile == 0
            || config.retain == 0
        {
            bail!(
                "EW_BENCH_SECONDS, _ROUNDS, _CONNECTIONS, _BATCH, _BUILD_JOBS, _RUNS, _RECONCILE and _RETAIN must be > 0"
            );
        }
        Ok(config)
    }

    /// Items per open kind (overdue, unknown, held, duplicates).
    pub(crate) fn quarter(&self) -> u64 {
        self.open / 4
    }
}
