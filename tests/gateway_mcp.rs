//! The MCP gateway, spoken to as an agent does: a real MCP client (rmcp)
//! talks to the real binary's gateway, which talks MCP to the real binary's
//! tool server, whose refund tool calls the fake provider over HTTP. What
//! the tests count is the provider's own record of refunds.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use effectwatch::fakeprovider::FakeProvider;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

type Client = RunningService<RoleClient, ClientConfig>;

const POLICY: &str = r#"
alias = "billing"
upstream_timeout_secs = 10

[tools.refund]
action = "refund"
op_key = "refund:{order_id}:{amount_minor}"
target = "invoice:{order_id}"
params = ["order_id", "amount_minor", "currency"]
amount_minor = "amount_minor"
currency = "currency"
provider = "fakepay"
external_ref = "id"
refused_when = ["declined"]

[tools.lookup_refunds]
read_only = true
"#;

struct Rig {
    db: common::TestDb,
    _login: common::roles::LoginRole,
    provider: FakeProvider,
    provider_url: String,
    agent_url: String,
    dir: tempfile::TempDir,
}

impl Rig {
    async fn new() -> Option<Rig> {
        let db = common::test_db().await;
        let login = common::roles::LoginRole::create(&db, "effect_agent").await;
        login.connect(&db).await?;
        let mut url = reqwest::Url::parse(&db.url).unwrap();
        url.set_username(&login.name).unwrap();
        url.set_password(None).unwrap();
        let (provider, provider_url) = FakeProvider::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("gateway.toml"), POLICY).unwrap();
        Some(Rig {
            db,
            _login: login,
            provider,
            provider_url,
            agent_url: url.to_string(),
            dir,
        })
    }

    fn policy(&self) -> PathBuf {
        self.dir.path().join("gateway.toml")
    }

    fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"));
        command
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path())
            .env_remove("DATABASE_URL");
        command
    }

    /// The tool server's command line. It ignores the operation key the
    /// gateway passes unless `--honour-key` is among `faults`: what is
    /// counted is then the gateway's doing alone, not the provider's.
    fn tools_words(&self, faults: &[&str]) -> Vec<String> {
        let mut words = vec![
            env!("CARGO_BIN_EXE_effectwatch").to_string(),
            "mcp-tools".into(),
            "--provider-url".into(),
            self.provider_url.clone(),
        ];
        let faults: Vec<&str> = if faults.contains(&"--honour-key") {
            faults
                .iter()
                .copied()
                .filter(|word| *word != "--honour-key")
                .collect()
        } else {
            faults.iter().copied().chain(["--ignore-key"]).collect()
        };
        words.extend(faults.iter().map(|word| word.to_string()));
        words
    }

    fn gateway_args(&self, extra: &[&str], upstream: Vec<String>) -> Vec<String> {
        let mut args = vec![
            "--database-url".to_string(),
            self.agent_url.clone(),
            "gateway".into(),
            "--policy".into(),
            self.policy().display().to_string(),
        ];
        args.extend(extra.iter().map(|word| word.to_string()));
        args.push("--upstream".into());
        args.extend(upstream);
        args
    }

    /// An agent's MCP session with a gateway on stdio, in front of the tool
    /// server started with `faults`.
    async fn stdio_client(&self, faults: &[&str], extra: &[&str]) -> (Client, Vec<String>) {
        let args = self.gateway_args(extra, self.tools_words(faults));
        let (transport, stderr) = TokioChildProcess::builder(self.command().configure(|command| {
            command.args(&args);
        }))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let mut lines = BufReader::new(stderr.unwrap()).lines();
        let client = agent("test-agent").serve(transport).await.unwrap();
        // Start-up has printed what it refuses and what it records.
        let mut seen = Vec::new();
        while let Ok(Ok(Some(line))) =
            tokio::time::timeout(Duration::from_millis(300), lines.next_line()).await
        {
            seen.push(line);
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (client, seen)
    }

    /// A gateway over HTTP in front of a tool server over HTTP; returns
    /// the gateway's URL and both processes.
    async fn http_gateway(&self) -> (String, Vec<tokio::process::Child>) {
        let mut tools = self.command();
        tools.args(&self.tools_words(&["--listen", "127.0.0.1:0"])[1..]);
        let (tools_child, tools_url) = listening(tools).await;
        let mut gateway = self.command();
        gateway.args(self.gateway_args(&["--listen", "127.0.0.1:0"], vec![tools_url]));
        let (gateway_child, gateway_url) = listening(gateway).await;
        (gateway_url, vec![tools_child, gateway_child])
    }

    fn refunds_of(&self, order_id: &str) -> usize {
        let target = format!("invoice:{order_id}");
        self.provider
            .effects()
            .iter()
            .filter(|effect| effect.kind == "refund" && effect.target.as_deref() == Some(&target))
            .count()
    }

    /// The effect as the ledger has it once the gateway has recorded what
    /// it answered: a success is recorded beside its reply, a moment after.
    async fn effect(&self, op_key: &str) -> (String, String, Option<Value>) {
        for _ in 0..100 {
            let (state, requested_by, result, being_recorded): (String, String, Option<Value>, bool) =
                sqlx::query_as(
                    "select state, requested_by, result, state = 'pending' and dispatched_at is not null
                       from ledger.effects where op_key = $1",
                )
                .bind(op_key)
                .fetch_one(&self.db.pool)
                .await
                .unwrap_or_else(|error| panic!("effect {op_key}: {error}"));
            if !being_recorded {
                return (state, requested_by, result);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("effect {op_key} is still dispatched and unrecorded after 5 s")
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec!["--database-url", &self.db.url];
        all.extend_from_slice(args);
        common::effectwatch_cli(&all)
    }
}

fn agent(name: &str) -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(name, "1.0"),
    )
}

/// Starts a process that prints `listening on http://…/mcp` on stderr.
async fn listening(mut command: tokio::process::Command) -> (tokio::process::Child, String) {
    command
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(at) = line.find("listening on ") {
                return line[at + "listening on ".len()..].trim().to_string();
            }
        }
        panic!("the process ended without listening");
    })
    .await
    .expect("the process did not listen within 30 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

/// An MCP client over HTTP that sends `Authorization: Bearer <token>`.
async fn http_client_with_token(url: &str, name: &str, token: &str) -> Client {
    agent(name)
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.to_string()).auth_header(token),
        ))
        .await
        .unwrap()
}

async fn http_client(url: &str, name: &str) -> Client {
    agent(name)
        .serve(StreamableHttpClientTransport::from_uri(url.to_string()))
        .await
        .unwrap()
}

fn refund(order_id: &str, amount_minor: i64, currency: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("refund").with_arguments(
        json!({"order_id": order_id, "amount_minor": amount_minor, "currency": currency})
            .as_object()
            .cloned()
            .unwrap(),
    )
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_models_retries_make_one_refund_and_get_one_result() {
    let Some(rig) = Rig::new().await else { return };
    let (client, _) = rig.stdio_client(&[], &[]).await;
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(
            client
                .call_tool(refund("INV-RETRY", 1500, "EUR"))
                .await
                .unwrap(),
        );
    }
    assert_eq!(rig.refunds_of("INV-RETRY"), 1, "five calls, one refund");
    assert!(answers.iter().all(|answer| answer.is_error != Some(true)));
    let first = answers[0]
        .structured_content
        .clone()
        .expect("the tool's structured result");
    for answer in &answers[1..] {
        assert_eq!(
            answer.structured_content.as_ref(),
            Some(&first),
            "a replay is the stored result"
        );
    }
    let (state, requested_by, stored) = rig.effect("refund:INV-RETRY:1500").await;
    assert_eq!(
        (state.as_str(), requested_by.as_str()),
        ("succeeded", "gateway:billing")
    );
    assert_eq!(stored.unwrap()["structuredContent"], first);
    let attempts: i64 = sqlx::query_scalar(
        "select count(*) from ledger.attempts a join ledger.effects e on e.id = a.effect_id \
          where e.op_key = 'refund:INV-RETRY:1500' and a.kind = 'replay'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(attempts, 4, "each repeat is in the ledger as a replay");
    // A repeat that came while the first call's success was being recorded
    // waited for it here: none is kept as a repeat in flight, a duplicate
    // an operator would be asked to look at.
    let kinds: Vec<String> = sqlx::query_scalar(
        "select a.kind from ledger.attempts a join ledger.effects e on e.id = a.effect_id \
          where e.op_key = 'refund:INV-RETRY:1500' order by a.id",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(kinds, ["dispatch", "replay", "replay", "replay", "replay"]);
    let dispatched_by: String = sqlx::query_scalar(
        "select dispatched_by from ledger.effects where op_key = 'refund:INV-RETRY:1500'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(dispatched_by, "gateway:billing (test-agent, tool refund)");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn eight_agents_at_once_over_http_make_one_refund_and_see_the_same_result() {
    let Some(rig) = Rig::new().await else { return };
    let (url, _children) = rig.http_gateway().await;
    let mut calls = Vec::new();
    for n in 0..8 {
        let url = url.clone();
        calls.push(tokio::spawn(async move {
            let client = http_client(&url, &format!("agent-{n}")).await;
            let answer = client
                .call_tool(refund("INV-EIGHT", 2500, "EUR"))
                .await
                .unwrap();
            let _ = client.cancel().await;
            answer
        }));
    }
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await.unwrap());
    }
    assert_eq!(rig.refunds_of("INV-EIGHT"), 1, "eight agents, one refund");
    let first = results[0].structured_content.clone();
    assert!(first.is_some(), "{}", text(&results[0]));
    for result in &results {
        assert_eq!(result.structured_content, first, "{}", text(result));
    }
}

#[tokio::test]
async fn a_lost_reply_is_unknown_never_retried_and_replayed_once_settled() {
    let Some(rig) = Rig::new().await else { return };
    let (client, _) = rig.stdio_client(&["--exit-after-refund"], &[]).await;
    let key = "refund:INV-LOST:990";
    let lost = client
        .call_tool(refund("INV-LOST", 990, "EUR"))
        .await
        .unwrap();
    assert_eq!(lost.is_error, Some(true));
    assert!(text(&lost).contains("Do not retry"), "{}", text(&lost));
    assert_eq!(rig.refunds_of("INV-LOST"), 1);
    assert_eq!(rig.effect(key).await.0, "unknown");

    let again = client
        .call_tool(refund("INV-LOST", 990, "EUR"))
        .await
        .unwrap();
    assert_eq!(again.is_error, Some(true));
    assert!(
        text(&again).contains("may already have happened"),
        "{}",
        text(&again)
    );
    assert_eq!(
        rig.refunds_of("INV-LOST"),
        1,
        "the repeat never reached the tool"
    );

    // A second refund of the same invoice while the first is in doubt is held.
    let second = client
        .call_tool(refund("INV-LOST", 500, "EUR"))
        .await
        .unwrap();
    assert!(text(&second).contains("is held"), "{}", text(&second));
    assert_eq!(rig.refunds_of("INV-LOST"), 1);

    let listed = rig.cli(&["list", "unknown", "--format", "json"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(key),
        "{listed:?}"
    );
    let resolved = rig.cli(&[
        "--operator",
        "ops",
        "resolve",
        key,
        "--succeeded",
        "re_seen_at_provider",
        "--reason",
        "the provider shows the refund",
    ]);
    assert!(resolved.status.success(), "{resolved:?}");
    let replay = client
        .call_tool(refund("INV-LOST", 990, "EUR"))
        .await
        .unwrap();
    assert_ne!(replay.is_error, Some(true), "{}", text(&replay));
    assert!(text(&replay).contains("already done"), "{}", text(&replay));
    assert_eq!(rig.refunds_of("INV-LOST"), 1);
    let _ = client.cancel().await;
}

#[tokio::test]
async fn other_terms_under_the_same_key_never_reach_the_tool() {
    let Some(rig) = Rig::new().await else { return };
    let (client, _) = rig.stdio_client(&[], &[]).await;
    client
        .call_tool(refund("INV-MIS", 700, "EUR"))
        .await
        .unwrap();
    let changed = client
        .call_tool(refund("INV-MIS", 700, "USD"))
        .await
        .unwrap();
    assert_eq!(changed.is_error, Some(true));
    let said = text(&changed);
    assert!(
        said.contains("params.currency: recorded \"EUR\", now \"USD\""),
        "{said}"
    );
    assert!(said.contains("Nothing was sent"), "{said}");
    assert_eq!(rig.refunds_of("INV-MIS"), 1);
    let _ = client.cancel().await;
}

/// A tool server that states no outcome: its wording is the fallback.
#[tokio::test]
async fn a_refusal_by_the_tool_is_failed_and_not_an_unknown() {
    let Some(rig) = Rig::new().await else { return };
    let (client, _) = rig
        .stdio_client(&["--decline-over", "1000", "--unsigned"], &[])
        .await;
    let declined = client
        .call_tool(refund("INV-BIG", 5000, "EUR"))
        .await
        .unwrap();
    assert_eq!(declined.is_error, Some(true));
    assert!(text(&declined).contains("declined"), "{}", text(&declined));
    assert_eq!(rig.effect("refund:INV-BIG:5000").await.0, "failed");
    assert_eq!(rig.refunds_of("INV-BIG"), 0);
    let _ = client.cancel().await;
}

#[tokio::test]
async fn an_unmapped_destructive_tool_is_refused_and_said_so_first() {
    let Some(rig) = Rig::new().await else { return };
    let (client, stderr) = rig.stdio_client(&[], &[]).await;
    let first = stderr.first().cloned().unwrap_or_default();
    assert!(
        first.contains("refusing 1 tool") && first.contains("close_account"),
        "{stderr:?}"
    );
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect()
    };
    let offered = names(client.list_all_tools().await.unwrap());
    assert!(
        offered.contains(&"refund".to_string()) && !offered.contains(&"close_account".to_string()),
        "a tool the gateway refuses is not offered to the model: {offered:?}"
    );
    let close = CallToolRequestParams::new("close_account")
        .with_arguments(json!({"account_id": "ACC-1"}).as_object().cloned().unwrap());
    let refused = client.call_tool(close.clone()).await.unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text(&refused).contains("refused close_account"),
        "{}",
        text(&refused)
    );
    let _ = client.cancel().await;

    let (allowed, stderr) = rig.stdio_client(&[], &["--allow-unmapped"]).await;
    assert!(
        stderr
            .first()
            .is_some_and(|line| line.contains("UNRECORDED")),
        "{stderr:?}"
    );
    let offered = names(allowed.list_all_tools().await.unwrap());
    assert!(
        offered.contains(&"close_account".to_string()),
        "{offered:?}"
    );
    let closed = allowed.call_tool(close).await.unwrap();
    assert!(
        text(&closed).contains("Closed account ACC-1"),
        "{}",
        text(&closed)
    );
    let _ = allowed.cancel().await;
}

#[tokio::test]
async fn the_tool_list_and_read_only_tools_are_relayed_untouched() {
    let Some(rig) = Rig::new().await else { return };
    let (through, _) = rig.stdio_client(&[], &[]).await;
    let words = rig.tools_words(&[]);
    let direct = agent("direct")
        .serve(
            TokioChildProcess::new(
                tokio::process::Command::new(&words[0]).configure(|command| {
                    command.args(&words[1..]);
                }),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let listed_through = serde_json::to_value(through.list_all_tools().await.unwrap()).unwrap();
    // Untouched but for the tool the gateway would refuse: not offered.
    let mut offered_direct = direct.list_all_tools().await.unwrap();
    offered_direct.retain(|tool| tool.name != "close_account");
    assert_eq!(
        listed_through,
        serde_json::to_value(offered_direct).unwrap()
    );

    through
        .call_tool(refund("INV-LOOK", 100, "EUR"))
        .await
        .unwrap();
    let lookup = CallToolRequestParams::new("lookup_refunds").with_arguments(
        json!({"order_id": "INV-LOOK"})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let seen_through = through.call_tool(lookup.clone()).await.unwrap();
    let seen_direct = direct.call_tool(lookup).await.unwrap();
    assert_eq!(
        serde_json::to_value(&seen_through).unwrap(),
        serde_json::to_value(&seen_direct).unwrap()
    );
    assert_eq!(seen_through.structured_content.unwrap()["count"], 1);
    let recorded: i64 = sqlx::query_scalar("select count(*) from ledger.effects")
        .fetch_one(&rig.db.pool)
        .await
        .unwrap();
    assert_eq!(recorded, 1, "the lookups are not effects");
    let _ = through.cancel().await;
    let _ = direct.cancel().await;
}

#[tokio::test]
async fn a_policy_mistake_is_one_line_at_start_up() {
    let Some(rig) = Rig::new().await else { return };
    for (policy, expected) in [
        (
            "alias = \"b\"\n[tools.refnud]\naction = \"refund\"\nop_key = \"r:{order_id}\"\ntarget = \"i:{order_id}\"\n",
            "\"refnud\", which the upstream does not offer",
        ),
        (
            "alias = \"b\"\n[tools.refund]\naction = \"refund\"\nop_key = \"r:{order}\"\ntarget = \"i:{order_id}\"\n",
            "argument \"order\", which the tool's input schema lacks",
        ),
        (
            "alias = \"b\"\n[tools.refund]\naction = \"refund\"\n",
            "needs op_key",
        ),
    ] {
        std::fs::write(rig.policy(), policy).unwrap();
        let output = rig
            .command()
            .args(rig.gateway_args(&[], rig.tools_words(&[])))
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    std::fs::write(rig.policy(), POLICY).unwrap();
    let missing = rig
        .command()
        .args(rig.gateway_args(&[], vec!["/nonexistent/tool-server".into()]))
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot start the upstream"), "{stderr}");
}

#[tokio::test]
async fn the_tool_server_is_given_the_operation_key_for_its_provider() {
    let Some(rig) = Rig::new().await else { return };
    let (client, _) = rig.stdio_client(&["--honour-key"], &[]).await;
    client
        .call_tool(refund("INV-KEY", 300, "EUR"))
        .await
        .unwrap();
    let keys: Vec<Option<String>> = rig
        .provider
        .effects()
        .into_iter()
        .map(|effect| effect.idempotency_key)
        .collect();
    assert_eq!(keys, vec![Some("refund:INV-KEY:300".to_string())]);
    let _ = client.cancel().await;
}

#[tokio::test]
async fn behind_pgbouncer_in_transaction_mode_every_call_is_recorded() {
    let Some(mut rig) = Rig::new().await else {
        return;
    };
    let Some(bouncer) = common::pgbouncer::PgBouncer::start(&rig.db.url) else {
        return;
    };
    let database = reqwest::Url::parse(&rig.db.url)
        .unwrap()
        .path()
        .trim_start_matches('/')
        .to_string();
    rig.agent_url = bouncer.url(&database);
    let (client, _) = rig.stdio_client(&[], &[]).await;
    for n in 0..40 {
        let order = format!("INV-PGB-{}", n % 20);
        let answer = client.call_tool(refund(&order, 100, "EUR")).await.unwrap();
        assert_ne!(answer.is_error, Some(true), "{}", text(&answer));
    }
    for n in 0..20 {
        assert_eq!(rig.refunds_of(&format!("INV-PGB-{n}")), 1);
    }
    let succeeded: i64 =
        sqlx::query_scalar("select count(*) from ledger.effects where state = 'succeeded'")
            .fetch_one(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(succeeded, 20);
    let _ = client.cancel().await;
}

fn refund_with(arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new("refund").with_arguments(arguments.as_object().cloned().unwrap())
}

/// One amount written four ways is one action: one key, one refund at the
/// tool server (which ignores the key here, so only the gateway can keep
/// it to one), and the tool is sent the amount the key was made of.
#[tokio::test]
async fn an_amount_written_four_ways_is_one_refund() {
    let Some(rig) = Rig::new().await else { return };
    let (client, _) = rig.stdio_client(&[], &[]).await;
    for amount in [
        json!(1500),
        json!("01500"),
        json!("+1500"),
        json!(" 1500"),
        json!(1500.0),
    ] {
        let answer = client
            .call_tool(refund_with(
                json!({"order_id": "INV-SPELT", "amount_minor": amount, "currency": "EUR"}),
            ))
            .await
            .unwrap();
        assert_ne!(answer.is_error, Some(true), "{amount}: {}", text(&answer));
    }
    assert_eq!(rig.refunds_of("INV-SPELT"), 1, "five spellings, one refund");
    let keys: Vec<String> =
        sqlx::query_scalar("select op_key from ledger.effects where target = 'invoice:INV-SPELT'")
            .fetch_all(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(keys, ["refund:INV-SPELT:1500"]);
    let fraction = client
        .call_tool(refund_with(
            json!({"order_id": "INV-SPELT-2", "amount_minor": 1500.5, "currency": "EUR"}),
        ))
        .await
        .unwrap();
    assert_eq!(fraction.is_error, Some(true));
    assert!(
        text(&fraction).contains("whole number"),
        "{}",
        text(&fraction)
    );
    assert_eq!(
        rig.refunds_of("INV-SPELT-2"),
        0,
        "a fraction is refused, never rounded"
    );
    client.cancel().await.unwrap();
}

/// An answer PostgreSQL cannot store as it is (a NUL the tool echoed) is
/// stored written out: the effect is settled, not left pending as if the
/// call had never been made, and the model is told what the tool did.
#[tokio::test]
async fn an_answer_the_ledger_cannot_store_as_is_still_settles_the_effect() {
    let Some(rig) = Rig::new().await else { return };
    let (client, _) = rig.stdio_client(&[], &[]).await;
    let answer = client
        .call_tool(refund_with(json!({
            "order_id": "INV-NUL", "amount_minor": 700, "currency": "EUR", "reason": "late\u{0}parcel"
        })))
        .await
        .unwrap();
    assert_ne!(answer.is_error, Some(true), "{}", text(&answer));
    assert!(text(&answer).contains("Refunded 700"), "{}", text(&answer));
    let (state, _, stored) = rig.effect("refund:INV-NUL:700").await;
    assert_eq!(state, "succeeded");
    assert!(
        stored.unwrap().to_string().contains("late\\\\u0000parcel"),
        "the NUL is kept written out"
    );
    assert_eq!(rig.refunds_of("INV-NUL"), 1);
    client.cancel().await.unwrap();
}

/// A tool's readOnlyHint is the tool server's claim, not the operator's
/// decision: a tool the policy does not name is refused however it
/// describes itself; and a tool under a mapped tool's likeness (a Cyrillic
/// е in refund) is named at start-up and refused even with
/// --allow-unmapped.
#[tokio::test]
async fn only_the_policy_says_a_tool_reads_and_a_lookalike_never_passes() {
    let Some(rig) = Rig::new().await else { return };
    let without_lookup = POLICY.replace("[tools.lookup_refunds]\nread_only = true\n", "");
    assert_ne!(without_lookup, POLICY);
    std::fs::write(rig.policy(), without_lookup).unwrap();
    let lookup = CallToolRequestParams::new("lookup_refunds")
        .with_arguments(json!({"order_id": "INV-IMP"}).as_object().cloned().unwrap());
    let (client, stderr) = rig.stdio_client(&["--impostor"], &[]).await;
    let said = stderr.join("\n");
    assert!(
        said.contains(r#""r\u{435}fund" looks like refund"#),
        "{stderr:?}"
    );
    assert!(said.contains("lookup_refunds"), "{stderr:?}");
    let refused = client.call_tool(lookup.clone()).await.unwrap();
    assert_eq!(refused.is_error, Some(true), "{}", text(&refused));
    assert!(text(&refused).contains("refused lookup_refunds"));
    let _ = client.cancel().await;

    let (allowed, _) = rig
        .stdio_client(&["--impostor"], &["--allow-unmapped"])
        .await;
    let offered: Vec<String> = allowed
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|tool| tool.name.to_string())
        .collect();
    assert!(
        offered.contains(&"refund".to_string()) && !offered.contains(&"r\u{435}fund".to_string()),
        "a lookalike is never offered, --allow-unmapped or not: {offered:?}"
    );
    let mut call = refund_with(json!({
        "order_id": "INV-IMP", "amount_minor": 900, "currency": "EUR"
    }));
    call.name = "r\u{435}fund".into();
    let impostor = allowed.call_tool(call).await.unwrap();
    assert_eq!(impostor.is_error, Some(true), "{}", text(&impostor));
    assert!(
        text(&impostor).contains("looks like refund"),
        "{}",
        text(&impostor)
    );
    assert_eq!(
        rig.refunds_of("INV-IMP"),
        0,
        "the lookalike never reached the provider"
    );
    let _ = allowed.cancel().await;
}

/// Issue 40, "A replay answers whoever asks": over HTTP, a caller without
/// the first caller's authorization sent its arguments and got its stored
/// result; the tool server never saw it.
#[tokio::test]
async fn over_http_a_repeat_is_answered_only_to_the_caller_that_made_it() {
    let Some(rig) = Rig::new().await else { return };
    let (url, _children) = rig.http_gateway().await;
    let first_caller = http_client_with_token(&url, "agent-a", "token-of-a").await;
    let done = first_caller
        .call_tool(refund("INV-CALLER", 1500, "EUR"))
        .await
        .unwrap();
    assert_ne!(done.is_error, Some(true), "{}", text(&done));
    let stored = done.structured_content.clone().expect("the tool's result");
    let refund_id = stored["id"].as_str().expect("the refund's id").to_string();

    // Another caller, and one with no authorization at all, with the same
    // arguments: a tool error that tells nothing of the refund.
    let second_caller = http_client_with_token(&url, "agent-b", "token-of-b").await;
    let anonymous = http_client(&url, "agent-anonymous").await;
    for (who, client) in [("token-of-b", &second_caller), ("anonymous", &anonymous)] {
        let refused = client
            .call_tool(refund("INV-CALLER", 1500, "EUR"))
            .await
            .unwrap();
        assert_eq!(refused.is_error, Some(true), "{who}: {}", text(&refused));
        assert_eq!(refused.structured_content, None, "{who}");
        let said = text(&refused);
        assert!(said.contains("belongs to another caller"), "{who}: {said}");
        assert!(!said.contains(&refund_id), "{who}: {said}");
    }
    assert_eq!(
        rig.refunds_of("INV-CALLER"),
        1,
        "nothing more reached the tool"
    );

    // The first caller's own repeat is the replay.
    let again = first_caller
        .call_tool(refund("INV-CALLER", 1500, "EUR"))
        .await
        .unwrap();
    assert_eq!(again.structured_content, Some(stored), "{}", text(&again));
    assert_eq!(rig.refunds_of("INV-CALLER"), 1);

    // The ledger knows the caller by a hash of its header, never the header.
    let (state, requested_by, _) = rig.effect("refund:INV-CALLER:1500").await;
    assert_eq!(state, "succeeded");
    let caller = requested_by
        .strip_prefix("gateway:billing/caller:")
        .unwrap_or_else(|| panic!("{requested_by}"));
    assert!(
        caller.len() == 32 && caller.chars().all(|c| c.is_ascii_hexdigit()),
        "{requested_by}"
    );
    let everything: String = sqlx::query_scalar(
        "select concat_ws(' ', e::text, (select string_agg(a::text, ' ') from ledger.attempts a
                                          where a.op_key = e.op_key))
           from ledger.effects e where e.op_key = 'refund:INV-CALLER:1500'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert!(!everything.contains("token-of"), "{everything}");
    // Both refused calls are kept, flagged, under the names of their callers.
    let refused: Vec<String> = sqlx::query_scalar(
        "select requested_by from ledger.attempts
          where op_key = 'refund:INV-CALLER:1500' and kind = 'refused' and flagged order by id",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused[0].starts_with("gateway:billing/caller:") && refused[0] != requested_by);
    assert_eq!(refused[1], "gateway:billing");

    // The second caller's own refund goes through as usual.
    let own = second_caller
        .call_tool(refund("INV-CALLER-B", 700, "EUR"))
        .await
        .unwrap();
    assert_ne!(own.is_error, Some(true), "{}", text(&own));
    assert_eq!(rig.refunds_of("INV-CALLER-B"), 1);
    for client in [first_caller, second_caller, anonymous] {
        let _ = client.cancel().await;
    }
}

#[tokio::test]
async fn a_policy_can_declare_every_caller_of_the_gateway_one_tenant() {
    let Some(rig) = Rig::new().await else { return };
    std::fs::write(rig.policy(), format!("replays = \"tenant\"\n{POLICY}")).unwrap();
    let (url, _children) = rig.http_gateway().await;
    let first_caller = http_client_with_token(&url, "agent-a", "token-of-a").await;
    let done = first_caller
        .call_tool(refund("INV-TENANT", 1500, "EUR"))
        .await
        .unwrap();
    assert_ne!(done.is_error, Some(true), "{}", text(&done));
    let second_caller = http_client_with_token(&url, "agent-b", "token-of-b").await;
    let replayed = second_caller
        .call_tool(refund("INV-TENANT", 1500, "EUR"))
        .await
        .unwrap();
    assert_eq!(
        replayed.structured_content,
        done.structured_content,
        "{}",
        text(&replayed)
    );
    assert_eq!(rig.refunds_of("INV-TENANT"), 1);
    let (_, requested_by, _) = rig.effect("refund:INV-TENANT:1500").await;
    assert_eq!(requested_by, "gateway:billing");
    for client in [first_caller, second_caller] {
        let _ = client.cancel().await;
    }
}

/// Each caller's authorization gets a connection of its own, but only so
/// many are kept, and none idle for long: the least recently used is let
/// go, and a call already made on it still has its answer.
#[tokio::test]
async fn connections_to_the_tool_server_are_bounded_and_idle_ones_let_go() {
    use effectwatch::gateway::upstream::{Upstream, UpstreamSpec};
    let Some(rig) = Rig::new().await else { return };
    let mut tools = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"));
    tools.args(&rig.tools_words(&["--listen", "127.0.0.1:0"])[1..]);
    let (_tools, url) = listening(tools).await;

    let bounded = Upstream::with_limits(
        UpstreamSpec::Url(url.clone()),
        2,
        Duration::from_secs(300),
        Duration::from_secs(10),
    );
    let first = bounded.peer(Some("Bearer caller-0")).await.unwrap();
    for caller in 1..6 {
        bounded
            .peer(Some(&format!("Bearer caller-{caller}")))
            .await
            .unwrap();
        assert!(bounded.open_connections().await <= 2, "caller {caller}");
    }
    let listed = first.list_all_tools().await.unwrap();
    assert!(
        listed.iter().any(|tool| tool.name == "refund"),
        "a connection let go still answers the calls made on it"
    );
    bounded.close().await;

    let idle = Upstream::with_limits(
        UpstreamSpec::Url(url),
        10,
        Duration::from_millis(200),
        Duration::from_secs(10),
    );
    idle.peer(Some("Bearer early")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    idle.peer(Some("Bearer later")).await.unwrap();
    assert_eq!(
        idle.open_connections().await,
        1,
        "the idle connection was let go"
    );
    idle.close().await;
}

/// The policy with no wording to read refusals by and no result field to
/// read the provider's reference from: only the server's statement tells.
fn unworded_policy() -> String {
    let policy = POLICY
        .replace("refused_when = [\"declined\"]\n", "")
        .replace("external_ref = \"id\"\n", "");
    assert_ne!(policy, POLICY);
    policy
}

/// A server whose SDK hides an error's text ("Error executing tool
/// refund") still says by structure that nothing was done: the decline is
/// failed, not an unknown for an operator, and the model is told the
/// server's own answer.
#[tokio::test]
async fn a_decline_stated_by_structure_is_failed_whatever_its_wording() {
    let Some(rig) = Rig::new().await else { return };
    std::fs::write(rig.policy(), unworded_policy()).unwrap();
    let (client, _) = rig
        .stdio_client(&["--decline-over", "1000", "--hidden-errors"], &[])
        .await;
    let declined = client
        .call_tool(refund("INV-HID", 5000, "EUR"))
        .await
        .unwrap();
    assert_eq!(declined.is_error, Some(true));
    assert_eq!(text(&declined), "Error executing tool refund");
    assert_eq!(rig.effect("refund:INV-HID:5000").await.0, "failed");
    let (class, reason): (Option<String>, Option<String>) = sqlx::query_as(
        "select error_class, failure_reason from ledger.effects where op_key = 'refund:INV-HID:5000'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(class.as_deref(), Some("business_rejection"));
    assert!(
        reason
            .as_deref()
            .is_some_and(|reason| reason.contains("said nothing was done")),
        "{reason:?}"
    );
    let again = client
        .call_tool(refund("INV-HID", 5000, "EUR"))
        .await
        .unwrap();
    assert!(
        text(&again).contains("closed"),
        "a repeat is answered with the recorded failure: {}",
        text(&again)
    );
    assert_eq!(rig.refunds_of("INV-HID"), 0);

    let done = client
        .call_tool(refund("INV-REF", 500, "EUR"))
        .await
        .unwrap();
    assert_ne!(done.is_error, Some(true), "{}", text(&done));
    assert_eq!(rig.effect("refund:INV-REF:500").await.0, "succeeded");
    let (external_ref,): (Option<String>,) = sqlx::query_as(
        "select external_ref from ledger.effects where op_key = 'refund:INV-REF:500'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    let provider_id = done.structured_content.unwrap()["id"].clone();
    assert_eq!(
        external_ref.map(Value::String),
        Some(provider_id),
        "the provider reference the server stated is the effect's"
    );
    let _ = client.cancel().await;
}

/// An error that states nothing and whose words say nothing of a refusal:
/// the outcome is in doubt, and the model is told what the server said —
/// not that its answer was lost.
#[tokio::test]
async fn an_error_that_states_no_outcome_says_what_the_server_answered() {
    let Some(rig) = Rig::new().await else { return };
    std::fs::write(rig.policy(), unworded_policy()).unwrap();
    let (client, _) = rig
        .stdio_client(&["--decline-over", "1000", "--unsigned"], &[])
        .await;
    let answered = client
        .call_tool(refund("INV-DOUBT", 5000, "EUR"))
        .await
        .unwrap();
    let said = text(&answered);
    assert_eq!(answered.is_error, Some(true));
    assert!(said.contains("declined: 5000 is over"), "{said}");
    assert!(said.contains("did not say whether"), "{said}");
    assert!(said.contains("may already have happened"), "{said}");
    assert!(!said.contains("was lost"), "{said}");
    assert_eq!(rig.effect("refund:INV-DOUBT:5000").await.0, "unknown");
    let _ = client.cancel().await;
}

/// Arguments the ledger refuses are the model's to correct: a tool error
/// naming the argument and the rule, nothing sent upstream, nothing
/// recorded — never an outage to try again later.
#[tokio::test]
async fn arguments_the_ledger_refuses_are_a_tool_error_naming_them() {
    let Some(rig) = Rig::new().await else { return };
    let with_reason = POLICY.replace(
        "params = [\"order_id\", \"amount_minor\", \"currency\"]",
        "params = [\"order_id\", \"amount_minor\", \"currency\", \"reason\"]",
    );
    std::fs::write(rig.policy(), with_reason).unwrap();
    let (client, _) = rig.stdio_client(&[], &[]).await;
    let mut deep = json!("bottom");
    for _ in 0..70 {
        deep = json!({ "deeper": deep });
    }
    let long_order = "A".repeat(600);
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "a currency of four letters",
            json!({"order_id": "INV-BAD1", "amount_minor": 100, "currency": "EURO"}),
            "currency",
            "three capital letters",
        ),
        (
            "a currency sign",
            json!({"order_id": "INV-BAD2", "amount_minor": 100, "currency": "€"}),
            "currency",
            "three capital letters",
        ),
        (
            "a negative amount",
            json!({"order_id": "INV-BAD3", "amount_minor": -100, "currency": "EUR"}),
            "amount_minor",
            "not negative",
        ),
        (
            "a key too long",
            json!({"order_id": long_order, "amount_minor": 100, "currency": "EUR"}),
            "order_id",
            "1 to 512 characters",
        ),
        (
            "params nested too deep",
            json!({"order_id": "INV-BAD5", "amount_minor": 100, "currency": "EUR", "reason": deep}),
            "reason",
            "deeper than 64 levels",
        ),
    ];
    for (case, arguments, argument, rule) in cases {
        let answer = client
            .call_tool(refund_with(arguments.clone()))
            .await
            .unwrap_or_else(|error| panic!("{case}: answered as an outage: {error}"));
        let said = text(&answer);
        assert_eq!(answer.is_error, Some(true), "{case}: {said}");
        assert!(said.contains(argument), "{case} names {argument}: {said}");
        assert!(said.contains(rule), "{case} names the rule: {said}");
        assert!(said.contains("do not retry it unchanged"), "{case}: {said}");
        assert!(!said.contains("Try again later"), "{case}: {said}");
        let order = arguments["order_id"].as_str().unwrap();
        assert_eq!(rig.refunds_of(order), 0, "{case}: nothing sent upstream");
    }
    let recorded: i64 = sqlx::query_scalar("select count(*) from ledger.effects")
        .fetch_one(&rig.db.pool)
        .await
        .unwrap();
    assert_eq!(recorded, 0, "nothing recorded, so nothing is left unknown");
    let _ = client.cancel().await;
}

/// A client that ends its HTTP session is told it ended: 204, not the
/// 202 the SDKs log as "Session termination failed".
#[tokio::test]
async fn closing_an_http_session_is_answered_no_content() {
    let Some(rig) = Rig::new().await else { return };
    let (url, mut children) = rig.http_gateway().await;
    let http = reqwest::Client::new();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "closing-client", "version": "1"}
        }
    });
    let opened = http
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert!(opened.status().is_success(), "{}", opened.status());
    let session = opened
        .headers()
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .unwrap()
        .to_string();
    drop(opened);
    let closed = http
        .delete(&url)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), reqwest::StatusCode::NO_CONTENT);
    let after = http
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert!(
        after.status().is_client_error(),
        "the session is closed: {}",
        after.status()
    );
    for child in &mut children {
        let _ = child.kill().await;
    }
}

/// A gateway SIGKILLed while its call is out to the tool server stops
/// beating for the effect: the effect is unknown (worker_lost) once the
/// lease ends, not at the end of its window, and `list unknown` shows it.
#[tokio::test]
async fn a_gateway_killed_mid_call_leaves_its_effect_unknown_within_the_lease() {
    let Some(rig) = Rig::new().await else { return };
    std::fs::write(
        rig.policy(),
        POLICY.replace(
            "upstream_timeout_secs = 10",
            "upstream_timeout_secs = 10\nheartbeat_lease_secs = 1",
        ),
    )
    .unwrap();
    // The provider makes the refund and never answers: the call stays out.
    rig.provider.set_fault(
        effectwatch::fakeprovider::Route::Create,
        Some(effectwatch::fakeprovider::Fault::ApplyThenHang),
    );
    let (url, mut children) = rig.http_gateway().await;
    let client = http_client(&url, "doomed-agent").await;
    let call = tokio::spawn(async move { client.call_tool(refund("INV-KILL", 990, "EUR")).await });
    let key = "refund:INV-KILL:990";
    let beats = |minimum: i64| {
        let pool = rig.db.pool.clone();
        async move {
            loop {
                let beats: Option<i64> = sqlx::query_scalar(
                    "select w.beats from ledger.worker_leases w join ledger.effects e on e.id = w.effect_id
                      where e.op_key = $1",
                )
                .bind(key)
                .fetch_optional(&pool)
                .await
                .unwrap();
                if beats.is_some_and(|beats| beats >= minimum) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // Beating while the call is out, past one lease.
    tokio::time::timeout(Duration::from_secs(10), beats(4))
        .await
        .expect("the gateway beats while its call is out");
    let written: String = sqlx::query_scalar("select state from ledger.effects where op_key = $1")
        .bind(key)
        .fetch_one(&rig.db.pool)
        .await
        .unwrap();
    assert_eq!(written, "pending");

    children[1].start_kill().unwrap();
    let killed = std::time::Instant::now();
    let last_error: String = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let found: Option<String> = sqlx::query_scalar(
                "select last_error from ledger.unknown_outcomes_at(null) where op_key = $1",
            )
            .bind(key)
            .fetch_optional(&rig.db.pool)
            .await
            .unwrap();
            if let Some(found) = found {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the effect is unknown once the lease ends");
    let took = killed.elapsed();
    eprintln!("gateway SIGKILLed mid-call: unknown in the pane after {took:?} (lease 1 s)");
    assert!(last_error.starts_with("worker_lost"), "{last_error}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let listed = rig.cli(&["list", "unknown", "--format", "json"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains(key) && listed.contains("worker_lost"),
        "{listed}"
    );
    assert_eq!(rig.refunds_of("INV-KILL"), 1);
    call.abort();
    for child in &mut children {
        let _ = child.kill().await;
    }
}

/// The model's retry that comes while the first call's success is still
/// being recorded (the reply already given, the recording held up in the
/// ledger) is answered the replay once the recording lands, well within
/// the in-flight wait, and the ledger keeps no repeat in flight — a
/// duplicate an operator would be asked to look at. (A retry that comes
/// before the recording's first statement waits in the gateway for its own
/// call: that moment is too short to hold open from outside.)
#[tokio::test]
async fn a_retry_while_the_success_is_recorded_waits_for_it_and_is_a_replay() {
    let Some(rig) = Rig::new().await else { return };
    rig.provider.set_fault(
        effectwatch::fakeprovider::Route::Create,
        Some(effectwatch::fakeprovider::Fault::Slow(
            Duration::from_millis(600),
        )),
    );
    let (client, _) = rig.stdio_client(&[], &[]).await;
    let key = "refund:INV-SLOWREC:700";
    let calls = tokio::spawn(async move {
        let first = client
            .call_tool(refund("INV-SLOWREC", 700, "EUR"))
            .await
            .unwrap();
        let answered = std::time::Instant::now();
        let second = client
            .call_tool(refund("INV-SLOWREC", 700, "EUR"))
            .await
            .unwrap();
        (first, second, answered, client)
    });
    // While the call is out, the test holds its lease row: the success's
    // recording (whose trigger drops the lease) waits until it lets go.
    let mut holder = rig.db.pool.begin().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let locked: Option<i64> = sqlx::query_scalar(
                "select w.effect_id from ledger.worker_leases w
                   join ledger.effects e on e.id = w.effect_id
                  where e.op_key = $1 for update of w",
            )
            .bind(key)
            .fetch_optional(&mut holder)
            .await
            .unwrap();
            if locked.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the call's lease");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    holder.commit().await.unwrap();
    let (first, second, answered, client) = calls.await.unwrap();
    assert_ne!(first.is_error, Some(true), "{}", text(&first));
    assert_eq!(
        second.structured_content,
        first.structured_content,
        "{}",
        text(&second)
    );
    assert!(
        answered.elapsed() < Duration::from_secs(10),
        "the retry waited for the recording, not the in-flight wait"
    );
    let kinds: Vec<String> = sqlx::query_scalar(
        "select a.kind from ledger.attempts a join ledger.effects e on e.id = a.effect_id \
          where e.op_key = $1 order by a.id",
    )
    .bind(key)
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    assert_eq!(kinds, ["dispatch", "replay"]);
    assert_eq!(rig.refunds_of("INV-SLOWREC"), 1);
    client.cancel().await.unwrap();
}
