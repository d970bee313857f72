//! The reconciler service settling a backlog: `EW_BENCH_RECONCILE` unknown
//! effects (half of which the fake provider holds, half it has never seen),
//! reconciled by 1, 2 and 4 reconcilers at once through the real Settler,
//! provider HTTP and audited SQL. Reported as effects per second and as a
//! ratio to the single reconciler of the same run; every run also checks
//! that no effect was reconciled twice and none was left.

use super::*;
#[allow(unused_imports)]
use effectwatch::ledger::LedgerPool;

use effectwatch::config::Config as EffectwatchConfig;
use effectwatch::fakeprovider::{FakeProvider, NewEffect, Route};
use effectwatch::ledger::reconciler::LeaseTerms;
use effectwatch::reconciler::{Reconciler, ReconcilerSettings};
use effectwatch::settle::Settler;

const PROVIDER: &str = "pay";

async fn backlog(pool: &LedgerPool, fake: &FakeProvider, count: u64) -> Result<()> {
    // The writer API, server-side: the same calls an agent makes, without
    // 30,000 round trips.
    sqlx::query(AssertSqlSafe(format!(
        "do $$ begin
           for i in 1..{count} loop
             perform ledger.begin_effect('bench:' || i, 'refund', 'invoice:' || i,
                 jsonb_build_object('amount_minor', 100 + i, 'currency', 'EUR'), 'bench-agent',
                 null, 100 + i, 'EUR', 'pay');
             perform ledger.mark_dispatched('bench:' || i, null, 'bench-worker');
             perform ledger.complete_effect('bench:' || i, 'unknown', worker => 'bench-worker');
           end loop;
         end $$"
    )))
    .execute(pool)
    .await?;
    for i in (2..=count).step_by(2) {
        fake.insert_effect(NewEffect {
            kind: "refund".into(),
            amount_minor: Some(100 + i as i64),
            currency: Some("EUR".into()),
            target: Some(format!("invoice:{i}")),
            idempotency_key: Some(format!("bench:{i}")),
            metadata: json!({}),
            reverses: None,
        });
    }
    Ok(())
}

fn settings(name: String) -> ReconcilerSettings {
    ReconcilerSettings {
        name,
        terms: LeaseTerms {
            lease: Duration::from_secs(300),
            grace: Duration::ZERO,
            batch: 100,
        },
        interval: Duration::from_secs(1),
        backoff: Duration::from_secs(60),
        backoff_max: Duration::from_secs(60),
        escalate_after: 5,
        sink: None,
        concurrency: 4,
    }
}

/// One run: a fresh ledger and provider, `reconcilers` at once.
async fn one_run(server: &Server, count: u64, reconcilers: usize) -> Result<(f64, u64, i64, i64)> {
    let db = BenchDb::create(server, &format!("reconcile{reconcilers}")).await?;
    let result = async {
        let pool = db.pool(4 * reconcilers as u32 + 4).await?;
        migrate::run(&pool).await?;
        let (fake, base_url) = FakeProvider::start().await?;
        backlog(&pool, &fake, count).await?;
        let config = Arc::new(
            EffectwatchConfig::from_toml(&effectwatch::fakeprovider::provider_toml(
                PROVIDER, &base_url, 5_000,
            ))
            .map_err(|e| anyhow::anyhow!(e))?,
        );
        let services: Vec<Arc<Reconciler>> = (0..reconcilers)
            .map(|n| {
                let name = format!("reconciler-{n}@bench");
                let settler = Settler::new(pool.clone(), config.clone(), name.clone(), false);
                Arc::new(Reconciler::new(settler, pool.clone(), settings(name)))
            })
            .collect();
        let lookups_before = fake.requests(Route::Lookup);
        let started = Instant::now();
        // A task each, as separate processes would be: one task would poll
        // every reconciler's work on one thread.
        let passes = futures_util::future::join_all(services.iter().map(|service| {
            let service = service.clone();
            tokio::spawn(async move { service.pass().await })
        }))
        .await;
        let seconds = started.elapsed().as_secs_f64();
        for pass in passes {
            pass??;
        }
        let lookups = fake.requests(Route::Lookup) - lookups_before;
        let (most, open): (i64, i64) = sqlx::query_as(
            "select (select coalesce(max(n), 0) from (select count(*) n from ledger.reconciliations
                                                      group by effect_id) c),
                    (select count(*) from ledger.effects where state = 'unknown')",
        )
        .fetch_one(&pool)
        .await?;
        pool.close().await;
        Ok::<_, anyhow::Error>((seconds, lookups, most, open))
    }
    .await;
    db.drop_db().await;
    result
}

pub(crate) async fn reconciler_bench(config: &Config, server: &Server) -> Result<String> {
    let count = config.reconcile;
    let mut report = String::new();
    writeln!(
        report,
        "\n## Reconciler: {count} unknown effects (half held by the provider), fake provider over HTTP\n"
    )?;
    writeln!(
        report,
        "| reconcilers at once | seconds | effects/s | vs 1 reconciler | provider lookups | most reconciliations of one effect | left unknown |"
    )?;
    writeln!(report, "|---:|---:|---:|---:|---:|---:|---:|")?;
    let mut single = None;
    for reconcilers in [1, 2, 4] {
        eprintln!("[reconciler] {reconcilers} at once over {count} effects");
        let (seconds, lookups, most, open) = one_run(server, count, reconcilers).await?;
        let rate = count as f64 / seconds;
        let ratio = rate / *single.get_or_insert(rate);
        writeln!(
            report,
            "| {reconcilers} | {seconds:.1} | {rate:.0} | {ratio:.2}× | {lookups} | {most} | {open} |"
        )?;
        if most > 1 || open > 0 {
            bail!("{reconcilers} reconcilers: {most} reconciliations of one effect, {open} left");
        }
    }
    Ok(report)
}
