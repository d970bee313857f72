//! The example tool servers (examples/tool_servers), each on its own MCP
//! SDK — Python's `mcp<2` (FastMCP), Python's `mcp` 2.x (MCPServer) and the
//! TypeScript SDK — behind the real gateway over stdio, spoken to by a real
//! MCP client (rmcp). Their policy (examples/tool_servers/refunds.toml) has
//! no `refused_when` and no `external_ref`: what the ledger records of each
//! call comes from what the server says in its result's `_meta` alone. And
//! examples/try_gateway.py, run as its docstring says.
//!
//! Each SDK is installed once per test process, from the example's own
//! requirements.txt or package.json, into a folder outside the work tree
//! that is removed when the process exits. Without python3, or node and
//! npm, a test says it is skipped — unless EFFECTWATCH_REQUIRE_CLIENTS=1,
//! where that is a failure.

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use common::toolchain::{self, run};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

type Client = RunningService<RoleClient, ClientConfig>;

/// The examples' policy: no `refused_when`, no `external_ref`.
const POLICY: &str = "examples/tool_servers/refunds.toml";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// This process's folder for the SDKs. A static is never dropped, so a
/// shell removes it once the pipe to its stdin, which only this process
/// holds, closes: when the process exits, however it exits. The shell is
/// kept (never waited for: it outlives the process, and init reaps it).
fn scratch() -> &'static Path {
    static SCRATCH: OnceLock<(PathBuf, Child)> = OnceLock::new();
    &SCRATCH
        .get_or_init(|| {
            let dir = tempfile::Builder::new()
                .prefix("effectwatch-tool-servers-")
                .tempdir()
                .expect("creating a folder for the SDKs")
                .keep();
            let watchdog = Command::new("/bin/sh")
                .args([
                    "-c",
                    r#"cat >/dev/null; rm -rf "$1""#,
                    "effectwatch-sdk-cleanup",
                ])
                .arg(&dir)
                .current_dir("/")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // Out of our process group, so a Ctrl-C aimed at us does not kill it first.
                .process_group(0)
                .spawn()
                .expect("starting the shell that removes the SDKs' folder");
            (dir, watchdog)
        })
        .0
}

/// A virtual environment with `requirements` installed; its python.
fn venv(name: &str, requirements: &Path) -> PathBuf {
    let venv = scratch().join(name);
    run(
        &format!("creating the {name} virtual environment"),
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
    );
    let python = venv.join("bin/python");
    run(
        &format!("installing {}", requirements.display()),
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(requirements),
    );
    python
}

fn python_mcp1() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        venv(
            "python-mcp1",
            &root().join("examples/tool_servers/python_mcp1/requirements.txt"),
        )
    })
}

fn python_mcp2() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        venv(
            "python-mcp2",
            &root().join("examples/tool_servers/python_mcp2/requirements.txt"),
        )
    })
}

/// A copy of the TypeScript example with its packages installed; its server.
fn typescript_server() -> &'static Path {
    static SERVER: OnceLock<PathBuf> = OnceLock::new();
    SERVER.get_or_init(|| {
        let copy = scratch().join("typescript");
        std::fs::create_dir_all(&copy).expect("creating the TypeScript example's copy");
        for file in ["package.json", "server.mjs"] {
            std::fs::copy(
                root().join("examples/tool_servers/typescript").join(file),
                copy.join(file),
            )
            .expect("copying the TypeScript example");
        }
        run(
            "installing the TypeScript example's packages (npm install)",
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&copy),
        );
        copy.join("server.mjs")
    })
}

fn words(program: &Path, script: &Path) -> Vec<String> {
    vec![program.display().to_string(), script.display().to_string()]
}

struct Rig {
    db: common::TestDb,
    _login: common::roles::LoginRole,
    agent_url: String,
    home: tempfile::TempDir,
}

impl Rig {
    async fn new() -> Option<Rig> {
        let db = common::test_db().await;
        let login = common::roles::LoginRole::create(&db, "effect_agent").await;
        login.connect(&db).await?;
        let mut url = reqwest::Url::parse(&db.url).unwrap();
        url.set_username(&login.name).unwrap();
        url.set_password(None).unwrap();
        let home = tempfile::tempdir().unwrap();
        Some(Rig {
            db,
            _login: login,
            agent_url: url.to_string(),
            home,
        })
    }

    /// An agent's MCP session with a gateway on stdio in front of the tool
    /// server `upstream`, and the lines the gateway writes on stderr.
    async fn gateway(&self, upstream: Vec<String>) -> (Client, Arc<Mutex<Vec<String>>>) {
        let policy = root().join(POLICY);
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"));
        command
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("DATABASE_URL");
        let (transport, stderr) = TokioChildProcess::builder(command.configure(|command| {
            command
                .args(["--database-url", &self.agent_url, "gateway", "--policy"])
                .arg(&policy)
                .arg("--upstream")
                .args(&upstream);
        }))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let said = Arc::new(Mutex::new(Vec::new()));
        let mut lines = BufReader::new(stderr.unwrap()).lines();
        let kept = said.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("test-agent", "1.0"),
        )
        .serve(transport)
        .await
        .unwrap_or_else(|error| panic!("the gateway in front of {upstream:?}: {error}"));
        (client, said)
    }

    /// The effect's state, external reference and whether it may be
    /// retried, once recorded: a success goes to the model first and is
    /// recorded beside the reply.
    async fn effect(&self, op_key: &str) -> (String, Option<String>, Option<bool>) {
        for _ in 0..100 {
            let (state, external_ref, retryable, being_recorded): (String, Option<String>, Option<bool>, bool) = sqlx::query_as(
                "select state, external_ref, retryable, state = 'pending' and dispatched_at is not null
                   from ledger.effects where op_key = $1",
            )
            .bind(op_key)
            .fetch_one(&self.db.pool)
            .await
            .unwrap_or_else(|error| panic!("effect {op_key}: {error}"));
            if !being_recorded {
                return (state, external_ref, retryable);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("effect {op_key} is still dispatched and unrecorded after 5 s")
    }
}

fn refund(order_id: &str, amount_minor: i64) -> CallToolRequestParams {
    CallToolRequestParams::new("refund").with_arguments(
        json!({"order_id": order_id, "amount_minor": amount_minor, "currency": "EUR"})
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

/// What every example server must make of each outcome its provider has.
async fn the_ledger_records_what_the_server_says(upstream: Vec<String>) {
    let Some(rig) = Rig::new().await else { return };
    let (client, stderr) = rig.gateway(upstream).await;
    let mut tools: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|tool| tool.name.to_string())
        .collect();
    tools.sort();
    assert_eq!(tools, ["lookup_refunds", "refund"]);

    // Performed: the provider's record is the effect's external reference,
    // and the provider was given the operation key.
    let done = client.call_tool(refund("INV-1", 1500)).await.unwrap();
    eprintln!("performed: {}", text(&done));
    assert_ne!(done.is_error, Some(true), "{}", text(&done));
    let made = done
        .structured_content
        .clone()
        .expect("the refund's structured result");
    assert_eq!(
        made["idempotency_key"], "refund:INV-1:1500",
        "the server gave its provider the gateway's key"
    );
    let provider_ref = made["id"].as_str().expect("the provider's id").to_string();
    assert_eq!(
        text(&done),
        format!("Refunded 1500 EUR on order INV-1 ({provider_ref})."),
        "the model gets the tool's own answer"
    );
    assert_eq!(
        rig.effect("refund:INV-1:1500").await,
        ("succeeded".to_string(), Some(provider_ref), None),
        "{:?}",
        stderr.lock().unwrap()
    );
    let again = client.call_tool(refund("INV-1", 1500)).await.unwrap();
    eprintln!("replayed: {}", text(&again));
    assert_eq!(
        again.structured_content,
        Some(made),
        "the repeat is the replay"
    );
    let lookup = client
        .call_tool(
            CallToolRequestParams::new("lookup_refunds")
                .with_arguments(json!({"order_id": "INV-1"}).as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(
        lookup.structured_content.unwrap()["count"],
        1,
        "the provider was asked once"
    );

    // Not performed: failed, whatever the error says (the policy has no
    // refused_when), and the model reads the server's own words. A repeat
    // is answered from the ledger, and the provider is not asked again.
    let declined = client.call_tool(refund("DECLINE-1", 700)).await.unwrap();
    eprintln!("declined: {}", text(&declined));
    assert_eq!(declined.is_error, Some(true), "{}", text(&declined));
    assert_eq!(
        text(&declined),
        "The provider declined the refund: order DECLINE-1 is not refundable."
    );
    assert_eq!(
        rig.effect("refund:DECLINE-1:700").await,
        ("failed".to_string(), None, Some(false)),
        "{}",
        text(&declined)
    );
    let repeated = client.call_tool(refund("DECLINE-1", 700)).await.unwrap();
    eprintln!("declined, repeated: {}", text(&repeated));
    assert_eq!(repeated.is_error, Some(true), "{}", text(&repeated));
    for words in ["state failed", "Nothing was sent"] {
        assert!(
            text(&repeated).contains(words),
            "{words:?} not in {}",
            text(&repeated)
        );
    }
    assert_eq!(rig.effect("refund:DECLINE-1:700").await.0, "failed");

    // Not performed for now: failed, and the same call may be made again.
    let busy = client.call_tool(refund("BUSY-1", 800)).await.unwrap();
    eprintln!("busy: {}", text(&busy));
    assert_eq!(busy.is_error, Some(true), "{}", text(&busy));
    assert_eq!(
        text(&busy),
        "No refund was made: too many refunds at once; try again in a minute."
    );
    assert_eq!(
        rig.effect("refund:BUSY-1:800").await,
        ("failed".to_string(), None, Some(true)),
        "{}",
        text(&busy)
    );

    // The server does not know: unknown, and the model is told not to
    // retry, with what the server said.
    let lost = client.call_tool(refund("TIMEOUT-1", 900)).await.unwrap();
    eprintln!("unknown: {}", text(&lost));
    assert_eq!(lost.is_error, Some(true), "{}", text(&lost));
    for words in [
        "may already have happened",
        "the provider did not answer within 10 s",
        "Do not retry",
    ] {
        assert!(
            text(&lost).contains(words),
            "{words:?} not in {}",
            text(&lost)
        );
    }
    let unknown: Vec<String> =
        sqlx::query_scalar("select op_key from ledger.effects where state = 'unknown'")
            .fetch_all(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(
        unknown,
        ["refund:TIMEOUT-1:900"],
        "the only effect in doubt"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_python_mcp1_fastmcp_server_is_recorded_as_it_says() {
    if !toolchain::present(&["python3"], "Python MCP SDK 1.x example tool server's") {
        return;
    }
    let server = root().join("examples/tool_servers/python_mcp1/server.py");
    the_ledger_records_what_the_server_says(words(python_mcp1(), &server)).await;
}

#[tokio::test]
async fn a_python_mcp2_mcpserver_server_is_recorded_as_it_says() {
    if !toolchain::present(&["python3"], "Python MCP SDK 2.x example tool server's") {
        return;
    }
    let server = root().join("examples/tool_servers/python_mcp2/server.py");
    the_ledger_records_what_the_server_says(words(python_mcp2(), &server)).await;
}

#[tokio::test]
async fn a_typescript_sdk_server_is_recorded_as_it_says() {
    if !toolchain::present(&["node", "npm"], "TypeScript example tool server's") {
        return;
    }
    let server = typescript_server();
    the_ledger_records_what_the_server_says(words(Path::new("node"), server)).await;
}

/// examples/try_gateway.py run as its docstring says: from the work
/// tree's root, with `effectwatch` on PATH, the ledger in DATABASE_URL, in
/// a virtual environment with `mcp>=2.3,<3` (python_mcp2's requirements),
/// the tool server's command after `--`. Its stdout, once the effect it
/// made is checked in the ledger.
async fn try_gateway(upstream: &[&str]) -> String {
    let python = python_mcp2();
    let db = common::test_db().await;
    let home = tempfile::tempdir().unwrap();
    let binaries = Path::new(env!("CARGO_BIN_EXE_effectwatch"))
        .parent()
        .expect("the binary's folder");
    let path = std::env::join_paths(std::iter::once(binaries.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let output = run(
        &format!("examples/try_gateway.py {upstream:?}"),
        Command::new(python)
            .arg("examples/try_gateway.py")
            .args(upstream)
            .env("PATH", path)
            .env("DATABASE_URL", &db.url)
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(root()),
    );
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    println!("{stdout}");
    let key = stdout
        .lines()
        .find_map(|line| line.strip_prefix("the ledger: ")?.split_once(' '))
        .map(|(key, _)| key.to_string())
        .unwrap_or_else(|| panic!("no line on the ledger in:\n{stdout}"));
    let order = key
        .strip_prefix("refund:")
        .and_then(|rest| rest.strip_suffix(":1500"))
        .unwrap_or_else(|| panic!("{key} is no refund of 1500"));
    for line in [
        "tools: refund, lookup_refunds".to_string(),
        "second refund call: ".to_string(),
        format!("refunds the tool server's provider holds for {order}: 1"),
        format!("the ledger: {key} is succeeded; its attempts: dispatch, replay"),
        "the second answer is the replay".to_string(),
    ] {
        assert!(stdout.contains(&line), "{line:?} not in:\n{stdout}");
    }
    let (state, requested_by, external_ref): (String, String, Option<String>) = sqlx::query_as(
        "select state, requested_by, external_ref from ledger.effects where op_key = $1",
    )
    .bind(&key)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (state.as_str(), requested_by.as_str()),
        ("succeeded", "gateway:demo-tools")
    );
    assert!(external_ref.is_some(), "the provider's reference is kept");
    stdout
}

/// `python examples/try_gateway.py`: in front of `effectwatch mcp-tools`.
#[tokio::test]
async fn try_gateway_py_shows_the_repeated_refund_is_a_replay() {
    if !toolchain::present(&["python3"], "try_gateway.py example's") {
        return;
    }
    let stdout = try_gateway(&[]).await;
    assert!(
        stdout.contains("refund requests the stand-in provider received: 1"),
        "{stdout}"
    );
}

/// `python examples/try_gateway.py -- python examples/tool_servers/python_mcp2/server.py`.
#[tokio::test]
async fn try_gateway_py_in_front_of_an_example_server() {
    if !toolchain::present(&["python3"], "try_gateway.py example's") {
        return;
    }
    let python = python_mcp2().display().to_string();
    let stdout = try_gateway(&["--", &python, "examples/tool_servers/python_mcp2/server.py"]).await;
    assert!(!stdout.contains("stand-in provider"), "{stdout}");
}
