//! 1. Writer throughput against a bare table.

use super::*;
#[allow(unused_imports)]
use effectwatch::ledger::LedgerPool;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WritePath {
    Baseline,
    Ledger,
}

impl WritePath {
    pub(crate) fn name(self) -> &'static str {
        match self {
            WritePath::Baseline => "baseline",
            WritePath::Ledger => "ledger",
        }
    }
}

pub(crate) struct RoundResult {
    pub(crate) round: usize,
    pub(crate) path: WritePath,
    pub(crate) effects: u64,
    pub(crate) elapsed: Duration,
    /// First round trip (begin_effect, or the baseline's INSERT), sorted.
    pub(crate) first_latencies: Vec<Duration>,
    /// What the writers' backends were doing, sampled from pg_stat_activity: (wait, samples).
    pub(crate) waits: Vec<(String, u64)>,
    /// Busy CPU time of the whole machine during the round (server and writers alike).
    pub(crate) cpu: Duration,
    /// Of which this process's own (the writers' client side: sqlx, the protocol, tokio).
    pub(crate) client_cpu: Duration,
    /// WAL the server wrote during the round, in bytes (the whole server).
    pub(crate) wal_bytes: i64,
}

/// Where the server's WAL ends now. pg_stat_wal would lag: a backend reports its counters
/// about once a second, so a round's last second would land in the next round.
async fn wal_position(pool: &LedgerPool) -> Result<String> {
    Ok(
        sqlx::query_scalar("select pg_current_wal_insert_lsn()::text")
            .fetch_one(pool)
            .await?,
    )
}

async fn wal_since(pool: &LedgerPool, from: &str) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint",
    )
    .bind(from)
    .fetch_one(pool)
    .await?)
}

/// CPU time this process has used so far (user + system), from /proc/self/stat.
pub(crate) fn own_cpu() -> Duration {
    let ticks_per_second = 100.0; // USER_HZ
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The command name may hold spaces: fields are counted after its closing parenthesis,
    // where utime and stime are the 12th and 13th.
    let ticks: u64 = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|value| value.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Duration::from_secs_f64(ticks as f64 / ticks_per_second)
}

/// Busy CPU time of the machine so far (all cores, user + system + irq), from /proc/stat.
pub(crate) fn machine_busy() -> Duration {
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
    pub(crate) fn per_second(&self) -> f64 {
        self.effects as f64 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn cpu_us_per_effect(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.effects.max(1) as f64
    }
}

/// Same columns, defaults and identity as ledger.effects; a primary key and a unique op_key;
/// the row's checks that the ledger's guard trigger makes, written as a bare table holds them,
/// as CHECK constraints (a table without them would accept rows the ledger refuses); none of
/// the ledger's triggers, functions, secondary or partial indexes.
pub(crate) const BASELINE_SCHEMA: &str = "
create schema bench_baseline;
create table bench_baseline.effects
    (like ledger.effects including defaults including identity);
alter table bench_baseline.effects add primary key (id), add unique (op_key),
    add check (length(op_key) between 1 and 512),
    add check (length(action) between 1 and 128),
    add check (length(target) between 1 and 512),
    add check (jsonb_typeof(params) = 'object'),
    add check (currency ~ '^[A-Z]{3}$'),
    add check (state in ('pending', 'held', 'unknown', 'succeeded', 'failed', 'compensated',
                         'cancelled')),
    add check (attention in ('duplicate', 'mismatch')),
    add check (error_class in ('timeout', 'connection_reset', 'server_error', 'invalid_response',
                               'business_rejection', 'rate_limited')),
    add check (during is null or not isempty(during)),
    add check (pending_window > interval '0'),
    add check ((amount_minor is null) = (currency is null)),
    add check (state <> 'held' or held_by is not null);
do $$
declare
    column_name text;
begin
    foreach column_name in array array['op_key', 'action', 'target'] loop
        execute format('alter table bench_baseline.effects add check (%I !~ %L)',
                       column_name, ledger.hidden_character_class());
    end loop;
end
$$;
";

pub(crate) const BASELINE_INSERT: &str = "
insert into bench_baseline.effects
    (op_key, action, target, params, params_hash, amount_minor, currency, provider,
     requested_by, state, pending_window, deadline_at)
values ($1, $2, $3, $4, encode(sha256(convert_to(($4::jsonb)::text, 'UTF8')), 'hex'), $5, $6, $7,
        $8, 'pending', interval '5 minutes', now() + interval '5 minutes')
on conflict (op_key) do nothing";

pub(crate) const BASELINE_UPDATE: &str = "
update bench_baseline.effects
   set state = 'succeeded', external_ref = $2, result = $3, version = version + 1,
       updated_at = now(), settled_at = now()
 where op_key = $1";

/// The refund every bench agent asks for: EUR 15.00 under a new key.
pub(crate) fn bench_refund(
    key: &str,
    target: String,
    params: serde_json::Value,
    requested_by: &str,
) -> Intent {
    Intent {
        op_key: key.to_string(),
        action: "refund".to_string(),
        target,
        params,
        requested_by: requested_by.to_string(),
        amount_minor: Some(1500),
        currency: Some("EUR".to_string()),
        provider: Some("bench".to_string()),
        ..Default::default()
    }
}

/// One writer: a connection of its own, new keys until `end`.
pub(crate) async fn writer_task(
    pool: LedgerPool,
    path: WritePath,
    tag: String,
    worker: usize,
    run_for: Duration,
    barrier: Arc<tokio::sync::Barrier>,
) -> Result<(u64, Duration, Vec<Duration>)> {
    let mut conn = pool.session_pool().acquire().await?;
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
                let intent = bench_refund(&key, target, params, &requested_by);
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
pub(crate) async fn sample_waits(url: String, run_for: Duration) -> Result<Vec<(String, u64)>> {
    let mut conn = PgConnection::connect_with(&options(&url)?).await?;
    let end = Instant::now() + run_for;
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    while Instant::now() < end {
        // Autovacuum workers too: the work a path's writes leave for them is its cost.
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "select case when backend_type = 'autovacuum worker' then 'autovacuum'
                         else coalesce(wait_event_type || ':' || wait_event, 'CPU') end, count(*)
               from pg_stat_activity
              where (datname = current_database() and pid <> pg_backend_pid()
                     and state = 'active' and backend_type = 'client backend')
                 or (backend_type = 'autovacuum worker' and datname = current_database())
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

pub(crate) async fn writer_round(
    pool: &LedgerPool,
    url: &str,
    path: WritePath,
    round: usize,
    tag: &str,
    run_for: Duration,
    connections: usize,
) -> Result<RoundResult> {
    let busy_before = machine_busy();
    let own_before = own_cpu();
    let wal_from = wal_position(pool).await?;
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
    let client_cpu = own_cpu().saturating_sub(own_before);
    let wal_bytes = wal_since(pool, &wal_from).await?;
    Ok(RoundResult {
        round,
        path,
        effects,
        elapsed,
        first_latencies,
        waits,
        cpu,
        client_cpu,
        wal_bytes,
    })
}

pub(crate) async fn writer_bench(config: &Config, db: &BenchDb) -> Result<String> {
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
    // A round's amount (CPU µs, WAL bytes) per effect, over every round of a path.
    let per_effect = |path: WritePath, amount: &dyn Fn(&RoundResult) -> f64| {
        let (total, effects) = results
            .iter()
            .filter(|r| r.path == path)
            .fold((0.0, 0u64), |(total, n), r| {
                (total + amount(r), n + r.effects)
            });
        total / effects.max(1) as f64
    };
    let cpu_per_effect = |path: WritePath| per_effect(path, &|r| r.cpu.as_secs_f64() * 1e6);
    let client_per_effect =
        |path: WritePath| per_effect(path, &|r| r.client_cpu.as_secs_f64() * 1e6);
    let wal_per_effect = |path: WritePath| per_effect(path, &|r| r.wal_bytes as f64);
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
        "WAL per effect: baseline {:.0} bytes, ledger {:.0} bytes",
        wal_per_effect(WritePath::Baseline),
        wal_per_effect(WritePath::Ledger)
    )?;
    let rest = |path: WritePath| cpu_per_effect(path) - client_per_effect(path);
    writeln!(
        out,
        "of which the writers' own process: baseline {:.0} µs, ledger {:.0} µs ({:.2}×); the rest (server, kernel): baseline {:.0} µs, ledger {:.0} µs ({:.2}×)",
        client_per_effect(WritePath::Baseline),
        client_per_effect(WritePath::Ledger),
        client_per_effect(WritePath::Ledger) / client_per_effect(WritePath::Baseline).max(1e-9),
        rest(WritePath::Baseline),
        rest(WritePath::Ledger),
        rest(WritePath::Ledger) / rest(WritePath::Baseline).max(1e-9)
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
