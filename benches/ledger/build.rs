//! 2. Building the ledgers through the writer API.

use super::*;
#[allow(unused_imports)]
use effectwatch::ledger::LedgerPool;

/// The four actions, picked by g; an overdue effect and the one it holds share g, hence action
/// and target.
pub(crate) const ACTION: &str =
    "(array['refund', 'booking', 'message', 'webhook'])[1 + (g % 4)::int]";

pub(crate) fn begin_sql(
    key: &str,
    target: &str,
    params: &str,
    extra: &str,
    expect: &str,
) -> String {
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

pub(crate) fn complete_sql(key: &str, outcome: &str, extra: &str) -> String {
    format!(
        "select count(*) from generate_series($1::bigint, $2::bigint) g,
           lateral ledger.complete_effect(op_key => {key}, outcome => '{outcome}'{extra}) c
         where c.applied"
    )
}

pub(crate) const PARAMS: &str =
    "jsonb_build_object('ref', 'REF-' || g, 'amount_minor', 100 + g % 5000, 'currency', 'EUR')";
/// Every tenth duplicate comes back with other params: a mismatch (rejected), not a replay.
pub(crate) const PARAMS_DUP_AGAIN: &str = "jsonb_build_object('ref', 'REF-' || g, 'amount_minor', 100 + g % 5000 + (g % 10 = 0)::int, 'currency', 'EUR')";

/// The open items, a quarter per kind, each as the writer API makes them.
pub(crate) fn open_steps() -> Vec<(&'static str, String)> {
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

pub(crate) fn fill_begin_sql() -> String {
    begin_sql("'ew:ok:' || g", "'invoice:' || g", PARAMS, "", "'proceed'")
}

/// One settled effect in `UNKNOWN_EVERY` went through unknown first (a timeout) and was settled
/// by a reconciliation that found it once at the provider, so the ledger carries the history and
/// reconciliations a real one has.
pub(crate) const UNKNOWN_EVERY: u64 = 100;

pub(crate) fn fill_complete_sql() -> String {
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

pub(crate) fn fill_reconcile_sql() -> String {
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
pub(crate) async fn build_batch(pool: &LedgerPool, wanted: u64, jobs: usize) -> Result<u64> {
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
pub(crate) async fn run_batched(
    pool: &LedgerPool,
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

pub(crate) async fn build_open(pool: &LedgerPool, quarter: u64, batch: u64) -> Result<()> {
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
pub(crate) async fn build_filler(
    pool: &LedgerPool,
    from: u64,
    to: u64,
    batch: u64,
    jobs: usize,
) -> Result<()> {
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

pub(crate) async fn vacuum_analyze(pool: &LedgerPool) -> Result<()> {
    let t0 = Instant::now();
    exec_raw(pool, "vacuum analyze").await?;
    eprintln!(
        "[build] vacuum analyze: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
