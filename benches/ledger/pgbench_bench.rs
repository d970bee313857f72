//! The writer comparison driven by a minimal client: pgbench, each
//! transaction of its script one effect — `begin_effect` +
//! `complete_effect(succeeded)` against the bare table's `INSERT … ON
//! CONFLICT` + `UPDATE` of the same shape, the same two round trips and
//! commits as the Rust harness. Rounds alternate (ABBA…), in pgbench's
//! simple protocol and in its prepared one, so the figure can be held
//! against the Rust harness's (sqlx, extended protocol, a client doing its
//! own work on the same cores). The variables are cast so that the
//! prepared protocol can type its parameters, and no literal holds a colon
//! before a letter: pgbench would take `'invoice:pgb'` for a variable.

use super::*;

const LEDGER_SCRIPT: &str = r#"\set k random(1, 1000000000000)
select decision from ledger.begin_effect(op_key => 'pgb:' || (:client_id)::int || ':' || (:k)::bigint, action => 'refund', target => 'invoice:' || 'pgb-' || (:client_id)::int || '-' || (:k)::bigint, params => jsonb_build_object('invoice', 'invoice:' || 'pgb-' || (:client_id)::int || '-' || (:k)::bigint, 'amount_minor', 1500, 'currency', 'EUR'), requested_by => 'pgbench', amount_minor => 1500, currency => 'EUR', provider => 'bench');
select applied from ledger.complete_effect(op_key => 'pgb:' || (:client_id)::int || ':' || (:k)::bigint, outcome => 'succeeded', external_ref => 'ref-' || (:k)::bigint, result => '{"ok": true}');
"#;

const BARE_SCRIPT: &str = r#"\set k random(1, 1000000000000)
insert into bench_baseline.effects (op_key, action, target, params, params_hash, amount_minor, currency, provider, requested_by, state, pending_window, deadline_at) values ('pgb:' || (:client_id)::int || ':' || (:k)::bigint, 'refund', 'invoice:' || 'pgb-' || (:client_id)::int || '-' || (:k)::bigint, jsonb_build_object('invoice', 'invoice:' || 'pgb-' || (:client_id)::int || '-' || (:k)::bigint, 'amount_minor', 1500, 'currency', 'EUR'), encode(sha256(convert_to(jsonb_build_object('invoice', 'invoice:' || 'pgb-' || (:client_id)::int || '-' || (:k)::bigint, 'amount_minor', 1500, 'currency', 'EUR')::text, 'UTF8')), 'hex'), 1500, 'EUR', 'bench', 'pgbench', 'pending', interval '5 minutes', now() + interval '5 minutes') on conflict (op_key) do nothing;
update bench_baseline.effects set state = 'succeeded', external_ref = 'ref-' || (:k)::bigint, result = '{"ok": true}', version = version + 1, updated_at = now(), settled_at = now() where op_key = 'pgb:' || (:client_id)::int || ':' || (:k)::bigint;
"#;

/// pgbench on the PATH, or the server's own.
fn pgbench_binary() -> Option<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("pgbench"))
            .find(|candidate| candidate.is_file())
    });
    on_path.or_else(|| {
        let mut found: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.path().join("bin/pgbench"))
            .filter(|candidate| candidate.is_file())
            .collect();
        found.sort();
        found.pop()
    })
}

/// One pgbench run: its transactions (effects) per second.
fn pgbench_round(
    binary: &std::path::Path,
    url: &str,
    script: &std::path::Path,
    protocol: &str,
    clients: usize,
    seconds: u64,
) -> Result<f64> {
    let output = std::process::Command::new(binary)
        .args(["-n", "-M", protocol, "-j", "2"])
        .args(["-c", &clients.to_string(), "-T", &seconds.to_string()])
        .arg("-f")
        .arg(script)
        .arg(url)
        .output()
        .context("running pgbench")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "pgbench failed: {}{}",
            String::from_utf8_lossy(&output.stderr),
            stdout
        );
    }
    let failed = stdout
        .lines()
        .find_map(|line| line.strip_prefix("number of failed transactions: "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    if failed > 0 {
        bail!("pgbench: {failed} transactions failed:\n{stdout}");
    }
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|tps| tps.parse::<f64>().ok())
        .with_context(|| format!("no tps in pgbench's output:\n{stdout}"))
}

pub(crate) async fn pgbench_bench(config: &Config, db: &BenchDb) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "\n## Writer throughput through pgbench ({} clients, {} s rounds)\n",
        config.connections, config.seconds
    )?;
    let Some(binary) = pgbench_binary() else {
        writeln!(
            out,
            "pgbench is not installed: this comparison was not run."
        )?;
        return Ok(out);
    };
    let pool = db.pool(2).await?;
    migrate::run(&pool).await?;
    exec_raw(&pool, BASELINE_SCHEMA).await?;
    let scripts = tempfile::tempdir()?;
    let ledger_script = scripts.path().join("ledger.sql");
    let bare_script = scripts.path().join("bare.sql");
    std::fs::write(&ledger_script, LEDGER_SCRIPT)?;
    std::fs::write(&bare_script, BARE_SCRIPT)?;

    writeln!(
        out,
        "| protocol | round | bare table (effects/s) | ledger (effects/s) | ledger / bare |"
    )?;
    writeln!(out, "|---|---|---|---|---|")?;
    let mut summary = Vec::new();
    for protocol in ["simple", "prepared"] {
        // Warm both scripts: connections, plans, caches; not reported.
        for script in [&bare_script, &ledger_script] {
            pgbench_round(&binary, &db.url, script, protocol, config.connections, 1)?;
        }
        let (mut bare_sum, mut ledger_sum) = (0.0, 0.0);
        for round in 1..=config.rounds {
            let order = if round % 2 == 1 {
                [&bare_script, &ledger_script]
            } else {
                [&ledger_script, &bare_script]
            };
            let (mut bare, mut ledger) = (0.0, 0.0);
            for script in order {
                checkpoint(&pool).await;
                eprintln!(
                    "[pgbench] {protocol} round {round} {}…",
                    script.file_name().unwrap().to_string_lossy()
                );
                let tps = pgbench_round(
                    &binary,
                    &db.url,
                    script,
                    protocol,
                    config.connections,
                    config.seconds,
                )?;
                if script == &bare_script {
                    bare = tps;
                } else {
                    ledger = tps;
                }
            }
            bare_sum += bare;
            ledger_sum += ledger;
            writeln!(
                out,
                "| {protocol} | {round} | {bare:.0} | {ledger:.0} | {:.1} % |",
                100.0 * ledger / bare
            )?;
        }
        summary.push((protocol, ledger_sum / bare_sum));
    }
    writeln!(out)?;
    for (protocol, ratio) in summary {
        writeln!(
            out,
            "pgbench, {protocol} protocol: the ledger writes {:.1} % of the bare table's effects per second (mean of rounds)",
            100.0 * ratio
        )?;
    }
    Ok(out)
}
