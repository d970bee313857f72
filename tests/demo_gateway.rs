//! The demo's MCP path settles like the rest of the demo: a refund made
//! through the gateway the demo offers, whose reply is lost, is found at
//! the demo's provider by the demo's own reconciler and settled as
//! succeeded, with no one paged.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use effectwatch::demo::DEMO_PROVIDER;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The demo's reconciler, sooner than its default (45 s of grace, so the
/// unknown pane can be seen): a pass every half second, after 1 s unknown.
const QUICK_RECONCILER: &str = r#"
[reconciler]
interval_secs = 0.5
grace_secs = 1
backoff_secs = 1.0
backoff_max_secs = 2.0
escalate_after = 3
"#;

/// What the demo says an MCP agent runs to reach its refund tool.
const GATEWAY_LINE: &str = "an MCP agent can reach the demo's refund tool through: ";

#[tokio::test]
async fn a_lost_mcp_reply_in_the_demo_is_reconciled_to_succeeded_by_the_demo() {
    let db = common::test_db().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, QUICK_RECONCILER).unwrap();
    let mut demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .arg("--config")
        .arg(&config)
        .args(["--database-url", &db.url])
        .args([
            "demo",
            "--headless",
            "--duration",
            "120s",
            "--agents",
            "1",
            "--rate",
            "0.05",
        ])
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the demo starts");
    let mut stderr = BufReader::new(demo.stderr.take().unwrap()).lines();
    let gateway = tokio::time::timeout(Duration::from_secs(60), async {
        let mut seen = Vec::new();
        while let Some(line) = stderr.next_line().await.unwrap() {
            if let Some(at) = line.find(GATEWAY_LINE) {
                return line[at + GATEWAY_LINE.len()..].to_string();
            }
            seen.push(line);
        }
        panic!("the demo ended without offering the gateway: {seen:?}");
    })
    .await
    .expect("the demo offered no gateway within 60 s");
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });

    // The gateway as the demo offers it, in front of its tool server, which
    // refunds at the demo's provider and then dies before it answers.
    let mut words = gateway.split_whitespace();
    let program = words.next().unwrap().to_string();
    let mut args: Vec<String> = words.map(str::to_string).collect();
    args.push("--exit-after-refund".into());
    let transport =
        TokioChildProcess::builder(tokio::process::Command::new(program).configure(|command| {
            command
                .args(&args)
                .env("HOME", dir.path())
                .env("XDG_CONFIG_HOME", dir.path())
                .env_remove("DATABASE_URL");
        }))
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
        .0;
    let agent = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("demo-agent", "1.0"),
    )
    .serve(transport)
    .await
    .unwrap();
    let lost = agent
        .call_tool(
            CallToolRequestParams::new("refund").with_arguments(
                json!({"order_id": "mcp-lost", "amount_minor": 990, "currency": "EUR"})
                    .as_object()
                    .cloned()
                    .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(lost.is_error, Some(true), "{lost:?}");
    let _ = agent.cancel().await;

    let key = "refund:MCP-LOST:990";
    let provider: Option<String> =
        sqlx::query_scalar("select provider from ledger.effects where op_key = $1")
            .bind(key)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(provider.as_deref(), Some(DEMO_PROVIDER));

    // The demo's reconciler asks the demo's provider, which holds the refund.
    let started = Instant::now();
    let state = loop {
        let state: String =
            sqlx::query_scalar("select state from ledger.effects where op_key = $1")
                .bind(key)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        if state != "unknown" || started.elapsed() > Duration::from_secs(60) {
            break state;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let findings: Vec<(String, Option<String>)> = sqlx::query_as(
        "select finding, provider from ledger.reconciliations where op_key = $1 order by id",
    )
    .bind(key)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(state, "succeeded", "{findings:?}");
    assert_eq!(
        findings,
        vec![("exists_once".to_string(), Some(DEMO_PROVIDER.to_string()))]
    );
    let escalations: i64 =
        sqlx::query_scalar("select count(*) from ledger.escalations where op_key = $1")
            .bind(key)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        escalations, 0,
        "no one is asked about a refund the provider shows"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(demo.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), demo.wait())
        .await
        .expect("the demo stops on SIGTERM")
        .unwrap();
    assert!(ended.success(), "{ended}");
}
