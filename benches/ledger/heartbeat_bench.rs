//! 5. Heartbeats: what 1,000 calls in flight cost while they beat.
//!
//! 1,000 effects are begun and dispatched (their provider calls "out"). Then:
//! a. each is beaten once, `connections` at a time, three times over: the latency of a beat
//!    and the beats per second one ledger takes;
//! b. the writer (begin + complete, new keys) alone, against the writer beside the beats at
//!    their real rate — 1,000 calls with the clients' default 15 s lease beat every 5 s, 200
//!    beats a second — alternating (ABBA), `EW_BENCH_SECONDS` each.

use super::*;
use effectwatch::ledger::LedgerPool;
use effectwatch::ledger::writer::{heartbeat, mark_dispatched};
use futures_util::StreamExt;

const IN_FLIGHT: usize = 1000;
/// The clients' and the gateway's default lease; a call beats every third of it.
const LEASE: Duration = Duration::from_secs(15);

pub(crate) async fn heartbeat_bench(config: &Config, server: &Server) -> Result<String> {
    let db = BenchDb::create(server, "heartbeat").await?;
    let result = measure_heartbeats(config, &db).await;
    db.drop_db().await;
    result
}

fn in_flight_key(n: usize) -> String {
    format!("bench:in-flight:{n}")
}

/// Beats for every call in flight once, `connections` at a time; each beat's latency.
async fn beat_all(pool: &LedgerPool, connections: usize) -> Result<Vec<Duration>> {
    let beats: Vec<Result<Duration>> = futures_util::stream::iter(0..IN_FLIGHT)
        .map(|n| async move {
            let started = Instant::now();
            let beat = heartbeat(pool, &in_flight_key(n), LEASE, "bench-worker").await?;
            anyhow::ensure!(beat.alive, "the call {n} is no longer in flight: {beat:?}");
            Ok(started.elapsed())
        })
        .buffer_unordered(connections)
        .collect()
        .await;
    beats.into_iter().collect()
}

/// Beats for the calls in flight at their real rate (each every third of the lease) until
/// `stop` says so; how many beats were made.
async fn beat_at_rate(pool: LedgerPool, stop: tokio::sync::watch::Receiver<bool>) -> Result<u64> {
    let every = LEASE / 3 / IN_FLIGHT as u32;
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut beats = 0u64;
    let mut next = 0usize;
    let mut out = futures_util::stream::FuturesUnordered::new();
    while !*stop.borrow() {
        tokio::select! {
            _ = ticks.tick() => {
                let pool = pool.clone();
                let key = in_flight_key(next % IN_FLIGHT);
                next += 1;
                out.push(async move { heartbeat(&pool, &key, LEASE, "bench-worker").await });
            }
            Some(beat) = out.next(), if !out.is_empty() => {
                beat?;
                beats += 1;
            }
        }
    }
    while let Some(beat) = out.next().await {
        beat?;
        beats += 1;
    }
    Ok(beats)
}

async fn measure_heartbeats(config: &Config, db: &BenchDb) -> Result<String> {
    let connections = config.connections;
    let pool = db.pool(connections as u32 + 8).await?;
    migrate::run(&pool).await?;
    eprintln!("[heartbeat] dispatching {IN_FLIGHT} calls…");
    let dispatched: Vec<Result<()>> = futures_util::stream::iter(0..IN_FLIGHT)
        .map(|n| {
            let pool = pool.clone();
            async move {
                let intent = Intent {
                    op_key: in_flight_key(n),
                    action: "refund".into(),
                    target: format!("invoice:in-flight-{n}"),
                    params: json!({"amount_minor": 1500, "currency": "EUR"}),
                    requested_by: "bench-agent".into(),
                    amount_minor: Some(1500),
                    currency: Some("EUR".into()),
                    ..Intent::default()
                };
                anyhow::ensure!(begin_effect(&pool, &intent).await?.decision == Decision::Proceed);
                anyhow::ensure!(
                    mark_dispatched(&pool, &intent.op_key, None, "bench-worker")
                        .await?
                        .claimed
                );
                Ok(())
            }
        })
        .buffer_unordered(connections)
        .collect()
        .await;
    dispatched.into_iter().collect::<Result<Vec<()>>>()?;

    // a. Every call beaten once, three times over (the first makes the leases).
    let mut rows = Vec::new();
    for pass in 1..=3 {
        let started = Instant::now();
        let mut latencies = beat_all(&pool, connections).await?;
        let took = started.elapsed();
        latencies.sort();
        eprintln!("[heartbeat] pass {pass}: {IN_FLIGHT} beats in {took:?}");
        rows.push((pass, took, latencies));
    }

    // b. The writer alone, and beside the beats at their real rate.
    let run_for = Duration::from_secs(config.seconds);
    let mut writer_rounds = Vec::new();
    for round in 1..=config.rounds {
        let order = if round % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for beating in order {
            checkpoint(&pool).await;
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let beats = beating.then(|| tokio::spawn(beat_at_rate(pool.clone(), stopped)));
            let result = writer_round(
                &pool,
                &db.url,
                WritePath::Ledger,
                round,
                &format!("hb-r{round}-{beating}"),
                run_for,
                connections,
            )
            .await?;
            let _ = stop.send(true);
            let beats = match beats {
                Some(task) => task.await??,
                None => 0,
            };
            eprintln!(
                "[heartbeat] round {round} (beating: {beating}): {:.0} effects/s, {beats} beats",
                result.per_second()
            );
            writer_rounds.push((round, beating, result, beats));
        }
    }
    let leases: i64 = sqlx::query_scalar("select count(*) from ledger.worker_leases")
        .fetch_one(&pool)
        .await?;
    anyhow::ensure!(
        leases == IN_FLIGHT as i64,
        "{leases} leases, not {IN_FLIGHT}"
    );
    pool.close().await;

    let mut out = String::new();
    writeln!(
        out,
        "\n## Heartbeats: {IN_FLIGHT} calls in flight, lease {} s ({} connections)\n",
        LEASE.as_secs(),
        connections
    )?;
    writeln!(
        out,
        "| pass | beats | seconds | beats/s | beat p50 ms | beat p99 ms |"
    )?;
    writeln!(out, "|---:|---:|---:|---:|---:|---:|")?;
    for (pass, took, latencies) in &rows {
        writeln!(
            out,
            "| {pass} | {IN_FLIGHT} | {:.3} | {:.0} | {:.3} | {:.3} |",
            took.as_secs_f64(),
            IN_FLIGHT as f64 / took.as_secs_f64(),
            percentile_ms(latencies, 50.0),
            percentile_ms(latencies, 99.0)
        )?;
    }
    let needed = IN_FLIGHT as f64 / (LEASE.as_secs_f64() / 3.0);
    writeln!(
        out,
        "\n{IN_FLIGHT} calls in flight need {needed:.0} beats/s at this lease.\n"
    )?;
    writeln!(
        out,
        "| round | beside the beats | effects/s | begin p50 ms | begin p99 ms | beats made |"
    )?;
    writeln!(out, "|---:|:---|---:|---:|---:|---:|")?;
    let mut alone = Vec::new();
    let mut beside = Vec::new();
    for (round, beating, result, beats) in &writer_rounds {
        writeln!(
            out,
            "| {round} | {} | {:.0} | {:.3} | {:.3} | {beats} |",
            if *beating { "yes" } else { "no" },
            result.per_second(),
            percentile_ms(&result.first_latencies, 50.0),
            percentile_ms(&result.first_latencies, 99.0)
        )?;
        if *beating {
            beside.push(result.per_second());
        } else {
            alone.push(result.per_second());
        }
    }
    let (alone, beside) = (median(&mut alone), median(&mut beside));
    writeln!(
        out,
        "\nWriter beside the beats / alone (medians): {:.3} ({beside:.0} / {alone:.0} effects/s).",
        beside / alone
    )?;
    Ok(out)
}
