//! 2. Measuring the panes at two ledger sizes.

use super::*;
#[allow(unused_imports)]
use effectwatch::ledger::LedgerPool;

pub(crate) struct PaneTiming {
    pub(crate) fetch_ms: f64,
    pub(crate) fetch_rows: usize,
    pub(crate) count_ms: f64,
    pub(crate) count: i64,
}

pub(crate) struct Measurement {
    pub(crate) effects: i64,
    pub(crate) attempts: i64,
    pub(crate) events: i64,
    pub(crate) panes: Vec<(Pane, PaneTiming)>,
    pub(crate) pane_counts_ms: f64,
    /// One whole console poll (`console::poller::poll`): every pane's window,
    /// the counts, escalations, approvals, audit, finance and what applies.
    pub(crate) console_poll_ms: f64,
    /// The polls between two finance readings (the last review kept).
    pub(crate) console_poll_kept_ms: f64,
}

pub(crate) async fn measure(
    pool: &LedgerPool,
    config: &Config,
    label: &str,
) -> Result<Measurement> {
    // Sizes for the report, not a console's reading: counting every state change of a 10M
    // ledger takes longer than the console's statement timeout, which ended the first 10M
    // run after its 55-minute build.
    let mut tx = pool.begin().await?;
    sqlx::query("set local statement_timeout = 0")
        .execute(&mut tx)
        .await?;
    let (effects, attempts, events): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from ledger.effects), (select count(*) from ledger.attempts),
                (select count(*) from ledger.effect_events)",
    )
    .fetch_one(&mut tx)
    .await?;
    tx.commit().await?;
    let mut panes_out = Vec::new();
    for pane in Pane::ALL {
        let mut fetch_times = Vec::new();
        let mut fetch_rows = 0;
        for run in 0..config.warmups + config.runs {
            let t0 = Instant::now();
            let rows = panes::fetch(pool, pane, None, &Filter::default(), config.limit, 0).await?;
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
        panes::counts(pool, None).await?;
        if run >= config.warmups {
            counts_times.push(ms(t0.elapsed()));
        }
    }
    // Each branch of ledger.pane_counts on its own, and the plan of the whole,
    // so a count that grows with the ledger is named, not guessed.
    for branch in PANE_COUNT_BRANCHES {
        let mut times = Vec::new();
        for run in 0..config.warmups + config.runs {
            let t0 = Instant::now();
            sqlx::query("select items, oldest from ledger.pane_counts where pane = $1")
                .bind(branch)
                .fetch_all(pool)
                .await?;
            if run >= config.warmups {
                times.push(ms(t0.elapsed()));
            }
        }
        eprintln!(
            "[panes] {label} pane_counts branch {branch}: {:.2} ms",
            median(&mut times)
        );
    }
    let plan: Vec<String> = sqlx::query_scalar(
        "explain (analyze, buffers, costs off) select * from ledger.pane_counts",
    )
    .fetch_all(pool)
    .await?;
    eprintln!("[panes] {label} pane_counts plan:\n{}", plan.join("\n"));
    Ok(Measurement {
        effects,
        attempts,
        events,
        panes: panes_out,
        pane_counts_ms: median(&mut counts_times),
        console_poll_ms: console_poll_ms(pool, config, false).await?,
        console_poll_kept_ms: console_poll_ms(pool, config, true).await?,
    })
}

/// What one refresh of a live console costs the ledger, as the console polls:
/// reading the finance review, or keeping the last one (most polls).
async fn console_poll_ms(pool: &LedgerPool, config: &Config, keep_finance: bool) -> Result<f64> {
    use effectwatch::console::poller::{PollSettings, poll, poll_keeping_finance};
    let settings = PollSettings {
        filter: Filter::default(),
        interval: Duration::from_secs(2),
        paused: false,
        offsets: [0; 4],
        at: None,
        settled_actions: 0,
    };
    let kept = match keep_finance {
        true => poll(pool, &settings).await?.finance,
        false => None,
    };
    // A reading of finance takes seconds on a big ledger: fewer runs of it.
    let (warmups, runs) = match keep_finance {
        true => (config.warmups, config.runs),
        false => (1, config.runs.min(3)),
    };
    let mut times = Vec::new();
    for run in 0..warmups + runs {
        let t0 = Instant::now();
        poll_keeping_finance(pool, &settings, kept.as_ref()).await?;
        if run >= warmups {
            times.push(ms(t0.elapsed()));
        }
    }
    Ok(median(&mut times))
}

/// The branches of `ledger.pane_counts`, each read through the view itself: the planner drops
/// the branches a constant `pane` rules out, so each is timed as the view defines it.
const PANE_COUNT_BRANCHES: [&str; 7] = [
    "overdue",
    "unknown",
    "duplicates",
    "held",
    "escalations",
    "approvals",
    "audit",
];

/// The partial indexes that serve each pane: their predicate is the view's filter.
/// (`attempts_duplicate_at_idx`, added for reports, has the same predicate as
/// `attempts_duplicate_idx`, ordered by time.)
pub(crate) fn expected_indexes(pane: Pane) -> &'static [&'static str] {
    match pane {
        Pane::Overdue => &["effects_pending_deadline_idx"],
        Pane::Unknown => &["effects_watched_idx"],
        Pane::Duplicates => &["attempts_duplicate_idx", "attempts_duplicate_at_idx"],
        Pane::Held => &["effects_watched_idx"],
    }
}

pub(crate) fn uses_any(plan: &str, indexes: &[&str]) -> bool {
    plan.lines().any(|line| {
        indexes
            .iter()
            .any(|index| line.split_whitespace().any(|word| word == *index))
    })
}

pub(crate) struct Plans {
    /// Per pane: plan of the panes::fetch statement, plan of count(*).
    pub(crate) panes: Vec<(Pane, String, String)>,
    /// Ledger tables of 10,000 rows or more: a sequential scan of one grows with the ledger.
    pub(crate) big_tables: Vec<String>,
}

/// Shared buffers touched by the whole statement (the top node's "Buffers:" line).
pub(crate) fn top_buffers(plan: &str) -> Option<u64> {
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
pub(crate) fn big_seq_scans(plan: &str, big_tables: &[String]) -> Vec<String> {
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

pub(crate) fn indexes_used(plan: &str) -> Vec<String> {
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
pub(crate) async fn explain(db: &BenchDb, limit: i64) -> Result<Plans> {
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
            panes::fetch(&mut conn, pane, None, &Filter::default(), limit, 0).await?;
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
    // A month of a history table uses its copy of the table's index, named
    // after the month: the plans name the table's index (the month is on
    // the same line, as the table scanned).
    let month_indexes: Vec<(String, String)> = sqlx::query_as(
        "select c.relname::text, parent.relname::text
           from pg_inherits i
           join pg_class c on c.oid = i.inhrelid and c.relkind = 'i'
           join pg_class parent on parent.oid = i.inhparent
           join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger'",
    )
    .fetch_all(&mut conn)
    .await?;
    let by_table_index = |plan: &str| -> String {
        plan.split_inclusive(char::is_whitespace)
            .map(|word| {
                let name = word.trim_end();
                match month_indexes.iter().find(|(month, _)| month == name) {
                    Some((_, table_index)) => word.replacen(name, table_index, 1),
                    None => word.to_string(),
                }
            })
            .collect()
    };
    let plans = plans
        .into_iter()
        .map(|(pane, fetch, count)| (pane, by_table_index(&fetch), by_table_index(&count)))
        .collect();
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
pub(crate) static NOTICES: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn take_notices() -> Vec<String> {
    std::mem::take(&mut *NOTICES.lock().unwrap_or_else(|e| e.into_inner()))
}

pub(crate) struct NoticeCapture;

pub(crate) struct MessageVisitor(String);

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

pub(crate) fn install_notice_capture() {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let only_notices = tracing_subscriber::filter::Targets::new()
        .with_target("sqlx::postgres::notice", tracing::Level::TRACE);
    let subscriber = tracing_subscriber::registry().with(NoticeCapture.with_filter(only_notices));
    let _ = tracing::subscriber::set_global_default(subscriber);
}

pub(crate) struct Ledger {
    pub(crate) measurement: Measurement,
    pub(crate) plans: Plans,
    pub(crate) build: Duration,
}

/// Builds a ledger of `total` effects in a database of its own — the settled ones first, then
/// the open items, so these are the newest rows as in production (open items are recent; an
/// old row id range would flatter any plan that walks the primary key). Returns the database
/// and how long the build took.
pub(crate) async fn build_ledger(
    config: &Config,
    server: &Server,
    label: &str,
    total: u64,
) -> Result<(BenchDb, Duration)> {
    let db = BenchDb::create(server, &format!("panes_{label}")).await?;
    let built = async {
        let jobs = config.build_jobs;
        let build = db.pool(jobs as u32).await?;
        let report = migrate::run(&build).await?;
        eprintln!("[panes] {label}: migrations applied: {}", report.applied.join(", "));
        let batch = build_batch(&build, config.batch, jobs).await?;
        let quarter = config.quarter().min(total / 4);
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
        anyhow::Ok(built)
    }
    .await;
    match built {
        Ok(built) => Ok((db, built)),
        Err(error) => {
            db.drop_db().await;
            Err(error)
        }
    }
}

/// One writer round on `db`, as agents write: new keys through begin and complete.
async fn writer_per_second(
    config: &Config,
    db: &BenchDb,
    label: &str,
    round: usize,
) -> Result<f64> {
    let writers = db.pool(config.connections as u32).await?;
    let result = writer_round(
        &writers,
        &db.url,
        WritePath::Ledger,
        round,
        &format!("{label}-{round}"),
        Duration::from_secs(config.seconds),
        config.connections,
    )
    .await;
    writers.close().await;
    let round = result?;
    eprintln!(
        "[panes] {label}: writer {:.0} effects/s ({} in {:.1} s)",
        round.per_second(),
        round.effects,
        round.elapsed.as_secs_f64()
    );
    Ok(round.per_second())
}

/// Builds and measures a ledger of `total` effects. The database is returned
/// when `keep` (for the writer's comparison), dropped otherwise.
pub(crate) async fn build_and_measure(
    config: &Config,
    server: &Server,
    label: &str,
    total: u64,
    keep: bool,
) -> Result<(Ledger, Option<BenchDb>)> {
    let (db, built) = build_ledger(config, server, label, total).await?;
    let result = async {
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
    if keep && result.is_ok() {
        return result.map(|ledger| (ledger, Some(db)));
    }
    db.drop_db().await;
    result.map(|ledger| (ledger, None))
}

/// The writer on the large ledger against the same writer on a small
/// reference ledger, in alternating rounds (A B B A …) so a drift of the
/// machine falls on both: effects per second of each round.
async fn writer_at_size(
    config: &Config,
    reference: &BenchDb,
    large: &BenchDb,
) -> Result<(Vec<f64>, Vec<f64>, i64)> {
    let (mut on_reference, mut on_large) = (Vec::new(), Vec::new());
    for round in 1..=config.rounds {
        let order = if round % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        };
        for reference_first in order {
            if reference_first {
                on_reference.push(writer_per_second(config, reference, "reference", round).await?);
            } else {
                on_large.push(writer_per_second(config, large, "large", round).await?);
            }
        }
    }
    // Each round adds its effects to the reference: how small it stayed.
    let pool = reference.pool(1).await?;
    let grown: i64 = sqlx::query_scalar("select count(*) from ledger.effects")
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    Ok((on_reference, on_large, grown))
}

pub(crate) async fn panes_bench(config: &Config, server: &Server) -> Result<String> {
    let quarter = config.quarter();
    let open = 4 * quarter;
    // The writer's reference: a ledger as small as a new one (EW_BENCH_WRITER_REFERENCE).
    let (reference, _) = build_ledger(config, server, "reference", config.writer_reference).await?;
    let measured = async {
        let (small_ledger, _) =
            build_and_measure(config, server, "small", config.small, false).await?;
        let (large_ledger, large_db) =
            build_and_measure(config, server, "large", config.effects, true).await?;
        let large_db = large_db.expect("kept");
        let rounds = writer_at_size(config, &reference, &large_db).await;
        large_db.drop_db().await;
        anyhow::Ok((small_ledger, large_ledger, rounds?))
    }
    .await;
    reference.drop_db().await;
    let (small_ledger, large_ledger, (mut on_reference, mut on_large, reference_grown)) = measured?;
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
    writeln!(
        out,
        "| console poll (every view, counts, finance, applicability) | poller::poll | {:.2} | {:.2} | {:.2}× | | |",
        small.console_poll_ms,
        large.console_poll_ms,
        large.console_poll_ms / small.console_poll_ms
    )?;
    writeln!(
        out,
        "| console poll between finance readings | poller::poll_keeping_finance | {:.2} | {:.2} | {:.2}× | | |",
        small.console_poll_kept_ms,
        large.console_poll_kept_ms,
        large.console_poll_kept_ms / small.console_poll_kept_ms
    )?;
    let (reference_median, large_median) = (median(&mut on_reference), median(&mut on_large));
    writeln!(
        out,
        "\nWriter at size, {} alternating rounds of {} s over {} connections: {:.0} effects/s on a ledger of {} effects ({} after its rounds), {:.0} on the {}-effect one: **{:.2}×** (rounds: reference {}; large {})",
        config.rounds,
        config.seconds,
        config.connections,
        reference_median,
        thousands(config.writer_reference),
        thousands(reference_grown as u64),
        large_median,
        thousands(config.effects),
        large_median / reference_median,
        on_reference
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        on_large
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
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
