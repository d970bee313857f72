//! What the MCP gateway adds to a tool call: an MCP client (the official
//! SDK) calling the demo's refund tool directly, against the same client
//! calling it through `effectwatch gateway` (begin_effect, mark_dispatched,
//! the tool, complete_effect), and a repeat answered from the ledger alone.
//! Rounds alternate so drift of the machine falls on every case alike.
//!
//! cargo bench --bench gateway
//! EW_GATEWAY_ROUNDS (default 8) and EW_GATEWAY_CALLS (per round, default 40)
//! make it longer; EW_GATEWAY_PAUSE_MS spaces the calls as a model's turns
//! do (default 0: back to back); DATABASE_URL picks the server, else a private cluster
//! with durable settings is started. EW_GATEWAY_EARLIER names an earlier
//! build of effectwatch whose gateway runs in the same rounds, on a ledger
//! of its own that build migrated (its SQL, not this one's), for a
//! before-and-after in one run.

use std::process::Stdio;
use std::time::{Duration, Instant};

use effectwatch::fakeprovider::FakeProvider;
use effectwatch::ledger::{self, ConnectSettings, migrate};
use effectwatch::localpg::{ClusterOptions, LocalCluster};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

type Client = RunningService<RoleClient, ClientConfig>;

const BINARY: &str = env!("CARGO_BIN_EXE_effectwatch");

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default)
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    if let Err(error) = runtime.block_on(run()) {
        eprintln!("gateway bench: {error}");
        std::process::exit(1);
    }
}

fn refund(order_id: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("refund").with_arguments(
        json!({"order_id": order_id, "amount_minor": 1250, "currency": "EUR"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

fn agent() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("bench-agent", "1.0"),
    )
}

async fn stdio_client(args: &[String]) -> Result<Client, String> {
    stdio_client_of(BINARY, args).await
}

async fn stdio_client_of(program: &str, args: &[String]) -> Result<Client, String> {
    let transport =
        TokioChildProcess::builder(tokio::process::Command::new(program).configure(|command| {
            command.args(args);
        }))
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| format!("starting {args:?}: {error}"))?
        .0;
    agent()
        .serve(transport)
        .await
        .map_err(|error| format!("MCP with {args:?}: {error}"))
}

/// Starts a process that says `listening on URL` on stderr.
async fn listening(args: &[String]) -> Result<(tokio::process::Child, String), String> {
    let mut child = tokio::process::Command::new(BINARY)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("starting {args:?}: {error}"))?;
    let mut lines = BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(at) = line.find("listening on ") {
            let url = line[at + "listening on ".len()..].trim().to_string();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok((child, url));
        }
    }
    Err(format!("{args:?} ended without listening"))
}

/// A model between two tool calls: thinking, not calling. Zero (the
/// default) sends each call the moment the last one is answered.
fn pause_between_calls() -> Duration {
    Duration::from_millis(setting("EW_GATEWAY_PAUSE_MS", 0) as u64)
}

async fn timed_calls(client: &Client, orders: &[String]) -> Result<Vec<Duration>, String> {
    let mut took = Vec::with_capacity(orders.len());
    let pause = pause_between_calls();
    for order in orders {
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        let started = Instant::now();
        let answer = client
            .call_tool(refund(order))
            .await
            .map_err(|error| format!("a call: {error}"))?;
        took.push(started.elapsed());
        if answer.is_error == Some(true) {
            return Err(format!(
                "the tool answered an error for {order}: {answer:?}"
            ));
        }
    }
    Ok(took)
}

/// The read-only lookup, straight or relayed by the gateway untouched: the
/// gateway's own hop, with no ledger call in it.
async fn timed_lookups(client: &Client, orders: &[String]) -> Result<Vec<Duration>, String> {
    let mut took = Vec::with_capacity(orders.len());
    for order in orders {
        let request = CallToolRequestParams::new("lookup_refunds").with_arguments(
            json!({"order_id": order})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let started = Instant::now();
        client
            .call_tool(request)
            .await
            .map_err(|error| format!("a lookup: {error}"))?;
        took.push(started.elapsed());
    }
    Ok(took)
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

/// Calls per second of `clients` making `per_client` calls each at once.
async fn throughput(clients: &[Client], per_client: usize, tag: &str) -> Result<f64, String> {
    let started = Instant::now();
    let mut calls = Vec::new();
    for (n, client) in clients.iter().enumerate() {
        let peer = client.peer().clone();
        let orders: Vec<String> = (0..per_client).map(|i| format!("{tag}-C{n}-{i}")).collect();
        calls.push(tokio::spawn(async move {
            for order in orders {
                peer.call_tool(refund(&order))
                    .await
                    .map_err(|error| error.to_string())?;
            }
            Ok::<(), String>(())
        }));
    }
    for call in calls {
        call.await.map_err(|error| error.to_string())??;
    }
    Ok((clients.len() * per_client) as f64 / started.elapsed().as_secs_f64())
}

async fn run() -> Result<(), String> {
    let rounds = setting("EW_GATEWAY_ROUNDS", 8);
    let per_round = setting("EW_GATEWAY_CALLS", 40);
    let (admin_url, cluster) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => (url, None),
        _ => {
            let cluster = LocalCluster::start(ClusterOptions::default())
                .map_err(|error| format!("a private cluster: {error}"))?;
            (cluster.url("postgres"), Some(cluster))
        }
    };
    let admin = ledger::connect(&ConnectSettings::new(admin_url.clone()))
        .await
        .map_err(|error| error.to_string())?;
    let database = format!("ew_bench_gateway_{}", std::process::id());
    migrate::create_database_if_missing(&admin, &database)
        .await
        .map_err(|error| error.to_string())?;
    let url = effectwatch::connection::url_with_database(&admin_url, &database);
    let pool = ledger::connect(&ConnectSettings::new(url.clone()))
        .await
        .map_err(|error| error.to_string())?;
    migrate::run(&pool)
        .await
        .map_err(|error| error.to_string())?;
    let fsync: String = sqlx::query_scalar("select current_setting('fsync')")
        .fetch_one(&pool)
        .await
        .map_err(|error| error.to_string())?;
    let (_provider, provider_url) = FakeProvider::start()
        .await
        .map_err(|error| error.to_string())?;
    let dir = tempfile::tempdir().map_err(|error| error.to_string())?;
    let policy = dir.path().join("gateway.toml");
    std::fs::write(&policy, include_str!("../examples/gateway.toml"))
        .map_err(|error| error.to_string())?;

    // The tool server ignores the key the gateway passes: every new order
    // is a new refund at the provider, through either path.
    let tools: Vec<String> = [
        BINARY,
        "mcp-tools",
        "--provider-url",
        &provider_url,
        "--ignore-key",
    ]
    .iter()
    .map(|word| word.to_string())
    .collect();
    let gateway_args_on = |url: &str| -> Vec<String> {
        let mut args: Vec<String> = [
            "--database-url",
            url,
            "gateway",
            "--policy",
            &policy.display().to_string(),
            "--upstream",
        ]
        .iter()
        .map(|word| word.to_string())
        .collect();
        args.extend(tools.iter().cloned());
        args
    };
    let gateway_args = gateway_args_on(&url);

    let direct = stdio_client(&tools[1..]).await?;
    let through = stdio_client(&gateway_args).await?;
    let earlier_binary = std::env::var("EW_GATEWAY_EARLIER")
        .ok()
        .filter(|path| !path.trim().is_empty());
    // The earlier gateway on a ledger of its own, migrated by that build:
    // its SQL is then the earlier SQL too, not this build's.
    let earlier_database = format!("{database}_earlier");
    let earlier = match &earlier_binary {
        Some(program) => {
            migrate::create_database_if_missing(&admin, &earlier_database)
                .await
                .map_err(|error| error.to_string())?;
            let earlier_url =
                effectwatch::connection::url_with_database(&admin_url, &earlier_database);
            let migrated = tokio::process::Command::new(program)
                .args(["--database-url", &earlier_url, "migrate"])
                .stdout(Stdio::null())
                .status()
                .await
                .map_err(|error| format!("migrating with {program}: {error}"))?;
            if !migrated.success() {
                return Err(format!("{program} migrate failed: {migrated}"));
            }
            Some(stdio_client_of(program, &gateway_args_on(&earlier_url)).await?)
        }
        None => None,
    };
    let warm: Vec<String> = (0..20).map(|n| format!("WARM-{n}")).collect();
    timed_calls(&direct, &warm).await?;
    timed_calls(&through, &warm).await?;
    if let Some(earlier) = &earlier {
        let warm: Vec<String> = (0..20).map(|n| format!("WARM-E{n}")).collect();
        timed_calls(earlier, &warm).await?;
    }

    let (mut direct_times, mut recorded_times, mut replay_times) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut earlier_times = Vec::new();
    let (mut direct_reads, mut relayed_reads) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let orders = |tag: &str| -> Vec<String> {
            (0..per_round)
                .map(|n| format!("{tag}-R{round}-{n}"))
                .collect()
        };
        direct_times.extend(timed_calls(&direct, &orders("DIRECT")).await?);
        let recorded = orders("GATEWAY");
        recorded_times.extend(timed_calls(&through, &recorded).await?);
        replay_times.extend(timed_calls(&through, &recorded).await?);
        direct_reads.extend(timed_lookups(&direct, &recorded).await?);
        relayed_reads.extend(timed_lookups(&through, &recorded).await?);
        if let Some(earlier) = &earlier {
            earlier_times.extend(timed_calls(earlier, &orders("EARLIER")).await?);
        }
    }
    for times in [
        &mut direct_times,
        &mut recorded_times,
        &mut replay_times,
        &mut earlier_times,
        &mut direct_reads,
        &mut relayed_reads,
    ] {
        times.sort();
    }
    let one_client = |times: &[Duration]| {
        times.len() as f64 / times.iter().map(Duration::as_secs_f64).sum::<f64>()
    };

    // Eight agents at once, over streamable HTTP.
    let mut http_tools = tools[1..].to_vec();
    http_tools.extend(["--listen".to_string(), "127.0.0.1:0".to_string()]);
    let (_tools_child, tools_url) = listening(&http_tools).await?;
    let mut http_gateway = gateway_args[..gateway_args.len() - tools.len()].to_vec();
    http_gateway.retain(|word| word != "--upstream");
    http_gateway.extend([
        "--listen".to_string(),
        "127.0.0.1:0".to_string(),
        "--upstream".to_string(),
        tools_url.clone(),
    ]);
    let (_gateway_child, gateway_url) = listening(&http_gateway).await?;
    let mut eight_direct = Vec::new();
    let mut eight_through = Vec::new();
    for _ in 0..8 {
        eight_direct.push(
            agent()
                .serve(StreamableHttpClientTransport::from_uri(tools_url.clone()))
                .await
                .map_err(|error| error.to_string())?,
        );
        eight_through.push(
            agent()
                .serve(StreamableHttpClientTransport::from_uri(gateway_url.clone()))
                .await
                .map_err(|error| error.to_string())?,
        );
    }
    let per_client = per_round.max(10);
    let mut direct_rates = Vec::new();
    let mut through_rates = Vec::new();
    for round in 0..3 {
        direct_rates.push(throughput(&eight_direct, per_client, &format!("HD{round}")).await?);
        through_rates.push(throughput(&eight_through, per_client, &format!("HG{round}")).await?);
    }

    println!(
        "\n## The MCP gateway: added latency per call ({} rounds × {} calls, {} ms between calls, fsync={fsync})\n",
        rounds,
        per_round,
        pause_between_calls().as_millis()
    );
    println!("| path | p50 | p99 | calls/s, 1 client |");
    println!("|---|---:|---:|---:|");
    for (name, times) in [
        ("direct to the tool server (stdio)", &direct_times),
        ("through the gateway, recorded (stdio)", &recorded_times),
        ("through the gateway, a repeat replayed", &replay_times),
        ("a read-only lookup, direct (stdio)", &direct_reads),
        ("a read-only lookup, relayed by the gateway", &relayed_reads),
    ] {
        println!(
            "| {name} | {} | {} | {:.0} |",
            ms(percentile(times, 0.5)),
            ms(percentile(times, 0.99)),
            one_client(times)
        );
    }
    if !earlier_times.is_empty() {
        println!(
            "| through the earlier build's gateway, recorded (stdio) | {} | {} | {:.0} |",
            ms(percentile(&earlier_times, 0.5)),
            ms(percentile(&earlier_times, 0.99)),
            one_client(&earlier_times)
        );
    }
    let added_by = |times: &[Duration], fraction: f64| {
        percentile(times, fraction).as_secs_f64()
            - percentile(&direct_times, fraction).as_secs_f64()
    };
    let added = |fraction: f64| added_by(&recorded_times, fraction);
    if !earlier_times.is_empty() {
        println!(
            "\nadded by the earlier build's gateway: p50 {:+.2} ms, p99 {:+.2} ms",
            added_by(&earlier_times, 0.5) * 1000.0,
            added_by(&earlier_times, 0.99) * 1000.0,
        );
    }
    println!(
        "\nadded by recording: p50 {:+.2} ms ({:.2}×), p99 {:+.2} ms ({:.2}×)",
        added(0.5) * 1000.0,
        percentile(&recorded_times, 0.5).as_secs_f64()
            / percentile(&direct_times, 0.5).as_secs_f64(),
        added(0.99) * 1000.0,
        percentile(&recorded_times, 0.99).as_secs_f64()
            / percentile(&direct_times, 0.99).as_secs_f64(),
    );
    println!(
        "8 clients over HTTP, {per_client} calls each, 3 rounds: direct {} calls/s; through the gateway {} calls/s",
        direct_rates
            .iter()
            .map(|rate| format!("{rate:.0}"))
            .collect::<Vec<_>>()
            .join(" / "),
        through_rates
            .iter()
            .map(|rate| format!("{rate:.0}"))
            .collect::<Vec<_>>()
            .join(" / "),
    );
    let _ = direct.cancel().await;
    let _ = through.cancel().await;
    if let Some(earlier) = earlier {
        let _ = earlier.cancel().await;
    }
    pool.close().await;
    for database in [&database, &earlier_database] {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "drop database if exists \"{database}\" with (force)"
        )))
        .execute(&admin)
        .await;
    }
    if let Some(cluster) = cluster {
        let _ = cluster.stop();
    }
    Ok(())
}
