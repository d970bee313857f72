//! Retention: the time to drop a month of history, against deleting the same history row by
//! row, and how long a writer waits while either runs.
//!
//! Two ledgers built alike through the writer API and aged `AGE_MONTHS` into the past
//! (tests/common/age_ledger.sql): on the first the aged months were made before aging, so
//! its history sits in month partitions that the prune drops whole; on the second they were
//! not, so all of it sits in the kept partitions and the same prune deletes it row by row.

use super::*;
#[allow(unused_imports)]
use effectwatch::ledger::LedgerPool;
use effectwatch::ledger::audit::CheckpointSigner;
use effectwatch::ledger::retention::{self, Cutoff, PruneOutcome};
use std::sync::atomic::AtomicBool;

const AGE_LEDGER: &str = include_str!("../../tests/common/age_ledger.sql");
const AGE_MONTHS: i32 = 2;
const OLDER_THAN_DAYS: u64 = 30;
/// How long the writer runs before the prune starts: its latency with nothing in the way.
const IDLE: Duration = Duration::from_secs(2);
/// The prune's session logs each statement over 200 ms, nested ones included, with its plan
/// (auto_explain without ANALYZE, so nothing is slowed): where the prune's time went.
const EXPLAIN_SLOW: &str = "load 'auto_explain';
    set auto_explain.log_min_duration = 200;
    set auto_explain.log_nested_statements = on;
    set auto_explain.log_level = notice;
    set client_min_messages = notice;";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The aged history in month partitions, dropped whole.
    ByMonth,
    /// The aged history in the kept partitions, deleted row by row: the baseline.
    RowByRow,
    /// As `ByMonth`, in a ledger that goes on after the aged months with
    /// EW_BENCH_RETAIN_RECENT more effects, which the prune keeps: the same
    /// month dropped from a larger ledger.
    ByMonthAtSize,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::ByMonth => "A: by month",
            Layout::RowByRow => "B: row by row (baseline)",
            Layout::ByMonthAtSize => "C: by month, in the larger ledger",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Layout::ByMonth => "retain_month",
            Layout::RowByRow => "retain_rows",
            Layout::ByMonthAtSize => "retain_size",
        }
    }
}

/// Begin latencies of the writer that ran beside the prune.
struct Stall {
    begins: usize,
    p99_ms: f64,
    max_ms: f64,
    idle_p99_ms: f64,
}

struct Pruned {
    seconds: f64,
    outcome: PruneOutcome,
    stall: Stall,
    /// The prune's statements that took longest, as they ended (inner before outer): (ms, text).
    slow: Vec<(f64, String)>,
    aged_rows: i64,
    effects_before: i64,
    size_before: i64,
    size_after: i64,
}

/// Moves the ledger `AGE_MONTHS` into the past, making those months first when `make_months`
/// (without them the aged rows land in the kept partitions).
async fn age(pool: &LedgerPool, make_months: bool) -> Result<()> {
    let mut tx = pool.begin().await?;
    if make_months {
        sqlx::query(
            "select ledger.ensure_history_partitions(now() - make_interval(months => $1), now())",
        )
        .bind(AGE_MONTHS)
        .execute(&mut tx)
        .await?;
    }
    sqlx::query("select set_config('effectwatch_test.age_months', $1::text, true)")
        .bind(AGE_MONTHS)
        .execute(&mut tx)
        .await?;
    sqlx::query(AGE_LEDGER)
        .execute(&mut tx)
        .await
        .context("aging the ledger (tests/common/age_ledger.sql needs a superuser)")?;
    tx.commit().await?;
    Ok(())
}

/// History rows older than the cutoff: (all, those in the kept partitions).
async fn aged_history(pool: &LedgerPool) -> Result<(i64, i64)> {
    Ok(sqlx::query_as(
        "with h as (
             select tableoid from ledger.attempts where at < now() - $1::interval
             union all select tableoid from ledger.effect_versions where at < now() - $1::interval
             union all select tableoid from ledger.reconciliations where at < now() - $1::interval
             union all select tableoid from ledger.audit_log where at < now() - $1::interval)
         select count(*), count(*) filter (where tableoid::regclass::text like '%\\_kept') from h",
    )
    .bind(older_than())
    .fetch_one(pool)
    .await?)
}

fn older_than() -> Duration {
    Duration::from_secs(OLDER_THAN_DAYS * 86_400)
}

async fn database_size(pool: &LedgerPool) -> Result<i64> {
    Ok(
        sqlx::query_scalar("select pg_database_size(current_database())")
            .fetch_one(pool)
            .await?,
    )
}

/// An agent writing new effects on a connection of its own until `stop`: when each
/// `begin_effect` started, and how long it took.
async fn writer_beside(
    pool: LedgerPool,
    tag: &'static str,
    stop: Arc<AtomicBool>,
) -> Result<Vec<(Instant, Duration)>> {
    let mut conn = pool.session_pool().acquire().await?;
    let mut samples = Vec::with_capacity(16_384);
    while !stop.load(Ordering::SeqCst) {
        let n = samples.len();
        let key = format!("bench:{tag}:{n}");
        let intent = bench_refund(
            &key,
            format!("invoice:{tag}-{n}"),
            json!({"n": n, "amount_minor": 1500, "currency": "EUR"}),
            "bench-agent",
        );
        let t0 = Instant::now();
        let begun = begin_effect(&mut *conn, &intent).await?;
        samples.push((t0, t0.elapsed()));
        if begun.decision != Decision::Proceed {
            bail!("begin_effect({key}) decided {:?}", begun.decision);
        }
        let completion = Completion {
            external_ref: Some(format!("ref-{tag}-{n}")),
            ..Default::default()
        };
        if !complete_effect(&mut *conn, &key, Outcome::Succeeded, &completion)
            .await?
            .applied
        {
            bail!("complete_effect({key}) was not applied");
        }
    }
    Ok(samples)
}

/// The prune's own pool: one connection that logs its slow statements as notices.
async fn explaining_pool(db: &BenchDb) -> Result<LedgerPool> {
    Ok(PgPoolOptions::new()
        .max_connections(1)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::raw_sql(EXPLAIN_SLOW).execute(conn).await?;
                Ok(())
            })
        })
        .connect_with(options(&db.url)?)
        .await?
        .into())
}

/// auto_explain's notices as (ms, the statement's first line).
fn slow_statements(notices: Vec<String>) -> Vec<(f64, String)> {
    notices
        .iter()
        .filter_map(|notice| {
            let (duration, plan) = notice.strip_prefix("duration: ")?.split_once(" ms")?;
            let text = plan.lines().find_map(|l| l.strip_prefix("Query Text: "))?;
            let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            Some((duration.parse().ok()?, text.chars().take(110).collect()))
        })
        .collect()
}

fn stall(samples: &[(Instant, Duration)], from: Instant, to: Instant) -> Stall {
    let mut during: Vec<Duration> = samples
        .iter()
        .filter(|(at, _)| *at >= from && *at <= to)
        .map(|(_, took)| *took)
        .collect();
    let mut idle: Vec<Duration> = samples
        .iter()
        .filter(|(at, _)| *at < from)
        .map(|(_, took)| *took)
        .collect();
    during.sort();
    idle.sort();
    Stall {
        begins: during.len(),
        p99_ms: percentile_ms(&during, 99.0),
        max_ms: during.last().map_or(f64::NAN, |took| ms(*took)),
        idle_p99_ms: percentile_ms(&idle, 99.0),
    }
}

/// Builds, ages and prunes one ledger in a database of its own, then drops it.
async fn build_and_prune(config: &Config, server: &Server, layout: Layout) -> Result<Pruned> {
    let db = BenchDb::create(server, layout.tag()).await?;
    let result = async {
        let jobs = config.build_jobs;
        let pool = db.pool(jobs as u32).await?;
        migrate::run(&pool).await?;
        let batch = build_batch(&pool, config.batch, jobs).await?;
        eprintln!(
            "[retention] {}: {} settled effects, then {} open items",
            layout.name(),
            thousands(config.retain),
            thousands(4 * config.quarter())
        );
        build_filler(&pool, 1, config.retain, batch, jobs).await?;
        build_open(&pool, config.quarter(), batch).await?;
        let t0 = Instant::now();
        age(&pool, layout != Layout::RowByRow).await?;
        eprintln!(
            "[retention] {}: aged {AGE_MONTHS} months in {:.1} s",
            layout.name(),
            t0.elapsed().as_secs_f64()
        );
        if layout == Layout::ByMonthAtSize {
            eprintln!(
                "[retention] {}: {} recent settled effects, which the prune keeps",
                layout.name(),
                thousands(config.retain_recent)
            );
            build_filler(
                &pool,
                config.retain + 1,
                config.retain + config.retain_recent,
                batch,
                jobs,
            )
            .await?;
        }
        vacuum_analyze(&pool).await?;
        let (aged_rows, in_kept) = aged_history(&pool).await?;
        let expected_in_kept = match layout {
            Layout::ByMonth | Layout::ByMonthAtSize => 0,
            Layout::RowByRow => aged_rows,
        };
        if aged_rows == 0 || in_kept != expected_in_kept {
            bail!(
                "{}: {in_kept} of {aged_rows} aged history rows are in the kept partitions, expected {expected_in_kept}",
                layout.name()
            );
        }
        checkpoint(&pool).await;
        let size_before = database_size(&pool).await?;
        let effects_before: i64 = sqlx::query_scalar("select count(*) from ledger.effects")
            .fetch_one(&pool)
            .await?;

        let dir = tempfile::tempdir()?;
        let signer =
            CheckpointSigner::generate(&dir.path().join("audit.key")).map_err(anyhow::Error::msg)?;
        // No statement timeout on the writer: a wait is measured whole, not cut at 10 s.
        let writer_pool = db.pool(1).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let pruner = explaining_pool(&db).await?;
        let writer = tokio::spawn(writer_beside(writer_pool.clone(), layout.tag(), stop.clone()));
        tokio::time::sleep(IDLE).await;
        eprintln!("[retention] {}: pruning", layout.name());
        take_notices();
        let from = Instant::now();
        let pruned = retention::prune(
            &pruner,
            Cutoff::OlderThan(older_than()),
            "bench-operator",
            "retention benchmark",
            None,
            Some(&signer),
        )
        .await;
        let to = Instant::now();
        let slow = slow_statements(take_notices());
        pruner.close().await;
        stop.store(true, Ordering::SeqCst);
        let samples = writer.await??;
        writer_pool.close().await;
        let outcome = pruned.with_context(|| format!("{}: prune", layout.name()))?;
        let seconds = (to - from).as_secs_f64();
        eprintln!(
            "[retention] {}: pruned {} effects in {seconds:.1} s; history {}",
            layout.name(),
            outcome.effects,
            outcome.history
        );

        let (checked, broken, problem): (i64, Option<i64>, Option<String>) = sqlx::query_as(
            "select checked, first_broken_seq, problem from ledger.verify_audit_chain()",
        )
        .fetch_one(&pool)
        .await?;
        if let Some(seq) = broken {
            bail!(
                "{}: the audit chain does not verify after the prune, at entry {seq}: {}",
                layout.name(),
                problem.unwrap_or_default()
            );
        }
        eprintln!(
            "[retention] {}: audit chain verified ({checked} entries)",
            layout.name()
        );
        let months = outcome.history["months"].as_array().map_or(0, Vec::len);
        match layout {
            Layout::ByMonth | Layout::ByMonthAtSize if months == 0 => {
                bail!("{}: no month was dropped: {}", layout.name(), outcome.history)
            }
            Layout::RowByRow if months > 0 => {
                bail!("{}: months were dropped: {}", layout.name(), outcome.history)
            }
            _ => {}
        }
        let size_after = database_size(&pool).await?;
        pool.close().await;
        anyhow::Ok(Pruned {
            seconds,
            outcome,
            stall: stall(&samples, from, to),
            slow,
            aged_rows,
            effects_before,
            size_before,
            size_after,
        })
    }
    .await;
    db.drop_db().await;
    result
}

/// The rows of every history table in `history[field]` ({table: n}), summed.
fn history_total(history: &serde_json::Value, field: &str) -> i64 {
    history[field]
        .as_object()
        .map_or(0, |tables| tables.values().filter_map(|n| n.as_i64()).sum())
}

fn mb(bytes: i64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub(crate) async fn retention_bench(config: &Config, server: &Server) -> Result<String> {
    // At size, the same aged month is dropped from a ledger of its own and
    // from one with EW_BENCH_RETAIN_RECENT more effects; else by month
    // against row by row.
    let baseline = if config.retain_recent > 0 {
        Layout::ByMonthAtSize
    } else {
        Layout::RowByRow
    };
    let by_month = build_and_prune(config, server, Layout::ByMonth).await?;
    let other = build_and_prune(config, server, baseline).await?;
    let runs = [(Layout::ByMonth, &by_month), (baseline, &other)];
    let mut report = String::new();
    writeln!(
        report,
        "\n## Retention: dropping a month of history ({} settled effects + {} open items, aged {AGE_MONTHS} months, prune older than {OLDER_THAN_DAYS} days)\n",
        thousands(config.retain),
        thousands(4 * config.quarter())
    )?;
    writeln!(
        report,
        "| ledger | effects | aged history rows | prune | effects pruned | months dropped | history rows dropped whole | carried into kept | writer begins during prune | begin p99 / max during prune | begin p99 before | database before → after |"
    )?;
    writeln!(
        report,
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"
    )?;
    for (layout, run) in runs {
        let history = &run.outcome.history;
        let months: Vec<&str> = history["months"]
            .as_array()
            .map(|months| months.iter().filter_map(|m| m.as_str()).collect())
            .unwrap_or_default();
        writeln!(
            report,
            "| {} | {} | {} | {:.1} s | {} | {} | {} | {} | {} | {:.1} / {:.1} ms | {:.1} ms | {:.0} → {:.0} MB |",
            layout.name(),
            thousands(run.effects_before as u64),
            thousands(run.aged_rows as u64),
            run.seconds,
            thousands(run.outcome.effects as u64),
            if months.is_empty() {
                "none".to_string()
            } else {
                months.join(", ")
            },
            thousands(history_total(history, "dropped") as u64),
            thousands(history_total(history, "kept") as u64),
            run.stall.begins,
            run.stall.p99_ms,
            run.stall.max_ms,
            run.stall.idle_p99_ms,
            mb(run.size_before),
            mb(run.size_after),
        )?;
    }
    if baseline == Layout::RowByRow {
        writeln!(
            report,
            "\nPrune time, by month / row by row: **{:.2}×**.",
            by_month.seconds / other.seconds
        )?;
    } else {
        writeln!(
            report,
            "\nThe same month dropped from the larger ledger / from a ledger of its own: **{:.2}×** ({:.1} s / {:.1} s).",
            other.seconds / by_month.seconds,
            other.seconds,
            by_month.seconds
        )?;
    }
    for (layout, run) in runs {
        let o = &run.outcome;
        writeln!(
            report,
            "- {}: the pruned effects had {} attempts, {} events, {} reconciliations; {} tombstones; kept {}; history {}",
            layout.name(),
            o.attempts,
            o.events,
            o.reconciliations,
            o.tombstones,
            o.kept,
            o.history
        )?;
    }
    for (layout, run) in runs {
        writeln!(
            report,
            "\n{}: the prune's statements over 200 ms, in the order they ended (an outer statement's time includes those it ran):\n",
            layout.name()
        )?;
        for (took, text) in &run.slow {
            writeln!(report, "- {:.1} s `{text}`", took / 1000.0)?;
        }
    }
    Ok(report)
}
