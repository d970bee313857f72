//! `effectwatch gateway certify`, the real binary against the real binary's
//! MCP tool server over stdio and the fake provider: an honest tool server
//! passes every line it can check; one that refunds again on a repeated
//! request, or whose lookup lies, is named line by line.

mod common;

use effectwatch::fakeprovider::FakeProvider;

const POLICY: &str = r#"
alias = "certify"
upstream_timeout_secs = 10

[tools.refund]
action = "refund"
op_key = "refund:{order_id}:{amount_minor}"
target = "invoice:{order_id}"
params = ["order_id", "amount_minor", "currency"]
amount_minor = "amount_minor"
currency = "currency"
external_ref = "id"
refused_when = ["declined"]
lookup = "lookup_refunds"
lookup_count = "count"

[tools.lookup_refunds]
read_only = true
"#;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn line(&self, check: &str) -> &str {
        self.stdout
            .lines()
            .find(|line| line.contains(&format!("] {check}:")))
            .unwrap_or_else(|| panic!("no line for {check:?} in:\n{}", self.stdout))
    }
}

async fn certify(faults: &[&str], extra: &[&str]) -> Run {
    let db = common::test_db().await;
    let (_provider, provider_url) = FakeProvider::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("gateway.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let policy = policy.display().to_string();
    let mut args = vec![
        "--database-url",
        &db.url,
        "gateway",
        "certify",
        "--policy",
        &policy,
        "--tool",
        "refund",
        "--args",
        r#"{"order_id": "CERT", "amount_minor": 1500, "currency": "EUR"}"#,
    ];
    args.extend_from_slice(extra);
    args.extend([
        "--upstream",
        env!("CARGO_BIN_EXE_effectwatch"),
        "mcp-tools",
        "--provider-url",
        &provider_url,
    ]);
    args.extend_from_slice(faults);
    let output = tokio::task::spawn_blocking({
        let args: Vec<String> = args.iter().map(|word| word.to_string()).collect();
        move || {
            let words: Vec<&str> = args.iter().map(String::as_str).collect();
            common::effectwatch_cli(&words)
        }
    })
    .await
    .unwrap();
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

const CHECKED: [&str; 8] = [
    "duplicates return the prior result",
    "deliveries at once act once",
    "ambiguous effects enter reconciliation, never a blind retry",
    "a crash after dispatch is never repeated",
    "retries reuse the stable identity",
    "a changed parameter under the old key is refused, not merged",
    "late messages cannot reopen work",
    "distinct actions stay distinct",
];

#[tokio::test]
async fn an_honest_tool_server_holds_every_line_certify_can_check() {
    let run = certify(&[], &["--staging"]).await;
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    for check in CHECKED {
        assert!(run.line(check).starts_with("[held]"), "{}", run.line(check));
    }
    assert!(
        run.line("a replay long after (past a prune) is still answered")
            .starts_with("[not checked]")
    );
}

#[tokio::test]
async fn a_tool_server_that_refunds_again_on_a_repeated_request_fails_the_identity_line() {
    let run = certify(&["--ignore-key"], &["--staging"]).await;
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    let identity = run.line("retries reuse the stable identity");
    assert!(identity.starts_with("[NOT HELD]"), "{identity}");
    assert!(identity.contains("provider holds Some(2)"), "{identity}");
    // What the gateway itself guarantees still holds in front of it.
    assert!(
        run.line("duplicates return the prior result")
            .starts_with("[held]")
    );
    assert!(
        run.stderr
            .contains("1 line(s) of the release checklist do not hold"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn a_lookup_that_lies_is_caught() {
    let run = certify(&["--lying-lookup"], &["--staging"]).await;
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    for check in [
        "duplicates return the prior result",
        "distinct actions stay distinct",
    ] {
        let line = run.line(check);
        assert!(
            line.starts_with("[NOT HELD]") && line.contains("Some(0)"),
            "{line}"
        );
    }
}

#[tokio::test]
async fn certify_refuses_a_ledger_not_said_to_be_staging() {
    let run = certify(&[], &[]).await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("--staging"), "{}", run.stderr);
    assert!(run.stdout.is_empty());
}
