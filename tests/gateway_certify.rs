//! `effectwatch gateway certify`, the real binary against the real binary's
//! MCP tool server over stdio and the fake provider: an honest tool server
//! passes every line it can check; one that refunds again on a repeated
//! request, or whose lookup lies, is named line by line. A run records its
//! effects under a name of its own, marks their keys with its run, and
//! leaves none of them open in the operators' panes.

mod common;

use effectwatch::fakeprovider::FakeProvider;

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

/// The call certification makes each case of.
const ARGS: &str = r#"{"order_id": "CERT", "amount_minor": 1500, "currency": "EUR"}"#;

async fn certify(faults: &[&str], extra: &[&str]) -> Run {
    let db = common::test_db().await;
    certify_on(&db.url, faults, extra).await
}

/// A certification run on the ledger at `url` (`--database-url`).
async fn certify_on(url: &str, faults: &[&str], extra: &[&str]) -> Run {
    certify_with(url, POLICY, ARGS, faults, extra).await
}

/// A certification run of `policy`'s refund tool, called with `call`.
async fn certify_with(url: &str, policy: &str, call: &str, faults: &[&str], extra: &[&str]) -> Run {
    let (_provider, provider_url) = FakeProvider::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, policy).unwrap();
    let policy = path.display().to_string();
    let mut args = vec![
        "--database-url",
        url,
        "gateway",
        "certify",
        "--policy",
        &policy,
        "--tool",
        "refund",
        "--args",
        call,
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
    // What the lookup counted reads as a number, never as Rust's Option.
    assert!(
        !run.stdout.contains("Some(") && !run.stdout.contains("None"),
        "{}",
        run.stdout
    );
    for check in CHECKED {
        assert!(
            run.line(check).contains("provider holds 1"),
            "{}",
            run.line(check)
        );
    }
    assert!(
        run.line("distinct actions stay distinct")
            .ends_with("provider holds 1 and 1"),
        "{}",
        run.stdout
    );
}

/// A key made of the currency and the amount as well as the order: only
/// the order is marked with the run, so each case is still a refund the
/// ledger takes, in EUR, of 1500.
const POLICY_WITH_MONEY_IN_THE_KEY: &str = r#"
alias = "billing"
upstream_timeout_secs = 10

[tools.refund]
action = "refund"
op_key = "refund:{order_id}:{currency}:{amount_minor}"
target = "invoice:{order_id}"
params = ["order_id", "amount_minor", "currency", "reason"]
amount_minor = "amount_minor"
currency = "currency"
external_ref = "id"
refused_when = ["declined"]
lookup = "lookup_refunds"
lookup_count = "count"

[tools.lookup_refunds]
read_only = true
"#;

#[tokio::test]
async fn a_key_made_of_the_currency_and_the_amount_holds_every_line() {
    let db = common::test_db().await;
    let run = certify_with(
        &db.url,
        POLICY_WITH_MONEY_IN_THE_KEY,
        r#"{"order_id": "CERT", "amount_minor": 1500, "currency": "EUR", "reason": "damaged"}"#,
        &[],
        &["--staging"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    for check in CHECKED {
        assert!(run.line(check).starts_with("[held]"), "{}", run.line(check));
    }
    let id = run.run_id();
    let made: Vec<(String, Option<String>, Option<i64>)> =
        sqlx::query_as("select op_key, currency, amount_minor from ledger.effects order by id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(made.len() >= 8, "{made:?}");
    for (key, currency, amount) in &made {
        assert!(
            key.starts_with(&format!("refund:CERT-certify-{id}-")) && key.ends_with(":EUR:1500"),
            "{key}"
        );
        assert_eq!(
            (currency.as_deref(), *amount),
            (Some("EUR"), Some(1500)),
            "{key}"
        );
    }
}

#[tokio::test]
async fn a_key_with_nothing_to_mark_but_its_money_is_refused_in_one_line() {
    let policy = POLICY_WITH_MONEY_IN_THE_KEY.replace(
        "op_key = \"refund:{order_id}:{currency}:{amount_minor}\"",
        "op_key = \"refund:{currency}:{amount_minor}\"",
    );
    let db = common::test_db().await;
    let run = certify_with(&db.url, &policy, ARGS, &[], &["--staging"]).await;
    assert_eq!(run.code, Some(3), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("cannot make each case a call of its own")
            && run.stderr.contains("refund:{currency}:{amount_minor}"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(effects(&db.pool).await.is_empty());
}

#[tokio::test]
async fn a_tool_server_that_refunds_again_on_a_repeated_request_fails_the_identity_line() {
    let run = certify(&["--ignore-key"], &["--staging"]).await;
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    let identity = run.line("retries reuse the stable identity");
    assert!(identity.starts_with("[NOT HELD]"), "{identity}");
    assert!(identity.contains("provider holds 2 "), "{identity}");
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
            line.starts_with("[NOT HELD]") && line.contains("provider holds 0"),
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

/// The name a certification run records its effects and its settlements
/// under, for the test policy's alias: never the gateway's `gateway:billing`.
const CERTIFY_REQUESTED_BY: &str = "certify:billing";

impl Run {
    /// The run id certification says it made its effects under.
    fn run_id(&self) -> String {
        let line = self
            .stdout
            .lines()
            .find(|line| line.starts_with("certification run "))
            .unwrap_or_else(|| panic!("no run line in:\n{}", self.stdout));
        line.trim_start_matches("certification run ")
            .split(':')
            .next()
            .unwrap()
            .to_string()
    }
}

#[derive(Debug, sqlx::FromRow)]
struct Made {
    op_key: String,
    requested_by: String,
    state: String,
}

/// Every effect in the ledger (a test's own: only the run writes there).
async fn effects(pool: &effectwatch::ledger::LedgerPool) -> Vec<Made> {
    sqlx::query_as::<_, Made>("select op_key, requested_by, state from ledger.effects order by id")
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn pane_keys(pool: &effectwatch::ledger::LedgerPool, view: &str) -> Vec<String> {
    sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!(
        "select op_key from ledger.{view}"
    )))
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_run_marks_its_effects_as_certification_and_leaves_none_of_them_open() {
    let db = common::test_db().await;
    let run = certify_on(&db.url, &[], &["--staging"]).await;
    // The checklist is what it was.
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    for check in CHECKED {
        assert!(run.line(check).starts_with("[held]"), "{}", run.line(check));
    }

    let made = effects(&db.pool).await;
    assert!(made.len() >= 8, "{made:?}");
    // Recorded under certification's own name, never the gateway's.
    for effect in &made {
        assert_eq!(effect.requested_by, CERTIFY_REQUESTED_BY, "{effect:?}");
    }
    // Nothing of the run in the panes operators act on.
    for view in [
        "overdue_pending",
        "unknown_outcomes",
        "held_conflicts",
        "open_escalations",
    ] {
        assert_eq!(
            pane_keys(&db.pool, view).await,
            Vec::<String>::new(),
            "{view}"
        );
    }
    let duplicates: Vec<String> =
        sqlx::query_scalar("select op_key from ledger.duplicate_attempts where needs_look")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(duplicates, Vec::<String>::new());
    for effect in &made {
        assert!(
            ["succeeded", "failed", "cancelled", "compensated"].contains(&effect.state.as_str()),
            "left open: {effect:?}"
        );
    }

    // The run says who it is and what it made; every key carries its marker.
    let id = run.run_id();
    assert!(
        run.stdout.contains(&format!(
            "certification run {id}: {} effect(s) made as {CERTIFY_REQUESTED_BY}",
            made.len()
        )),
        "{}",
        run.stdout
    );
    for effect in &made {
        assert!(
            effect.op_key.contains(&format!("certify-{id}-")),
            "{} lacks the run's marker certify-{id}-",
            effect.op_key
        );
    }

    // Each effect the run left open was settled by an operator function,
    // its audit entry giving the reason; the ones the writer settled have none.
    let reason = format!("certification run {id}: staging effect");
    let entries: Vec<(String, String, String, String)> = sqlx::query_as(
        "select op_key, action, operator, coalesce(reason, '') from ledger.audit_log order by seq",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let settled: Vec<&(String, String, String, String)> = entries
        .iter()
        .filter(|(_, action, _, _)| ["resolve", "cancel"].contains(&action.as_str()))
        .collect();
    for (key, _, operator, said) in &entries {
        assert_eq!(said, &reason, "{key}");
        assert_eq!(operator, CERTIFY_REQUESTED_BY, "{key}");
    }
    // An honest tool server: the run leaves open only the reply it dropped
    // (unknown) and the caller it killed after dispatch (pending); the tool
    // acted and answered with its reference both times, so both stand as done.
    let mut left_open: Vec<&Made> = made
        .iter()
        .filter(|effect| effect.op_key.contains("-lost:") || effect.op_key.contains("-crash:"))
        .collect();
    left_open.sort_by(|a, b| a.op_key.cmp(&b.op_key));
    assert_eq!(left_open.len(), 2, "{made:?}");
    let mut settled_keys: Vec<&String> = settled.iter().map(|(key, ..)| key).collect();
    settled_keys.sort();
    assert_eq!(
        settled_keys,
        left_open
            .iter()
            .map(|effect| &effect.op_key)
            .collect::<Vec<_>>(),
        "one settlement for each effect left open: {entries:?}"
    );
    for effect in left_open {
        assert_eq!(effect.state, "succeeded", "{effect:?}");
    }
    assert!(
        run.stdout
            .contains(&format!("settled {} effect(s) it left open", settled.len())),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn an_agent_login_settles_through_the_operator_url_or_certify_refuses_to_start() {
    let db = common::test_db().await;
    let agent = common::roles::LoginRole::create(&db, "effect_agent").await;
    let operator = common::roles::LoginRole::create(&db, "effect_operator").await;
    if agent.connect(&db).await.is_none() {
        return;
    }
    let as_login = |login: &common::roles::LoginRole| {
        let mut url = reqwest::Url::parse(&db.url).unwrap();
        url.set_username(&login.name).unwrap();
        url.set_password(None).unwrap();
        url.to_string()
    };
    let (agent_url, operator_url) = (as_login(&agent), as_login(&operator));

    // An agent's login alone may not settle what the run would leave open:
    // nothing is made.
    let refused = certify_on(&agent_url, &[], &["--staging"]).await;
    assert_eq!(
        refused.code,
        Some(8),
        "{}\n{}",
        refused.stdout,
        refused.stderr
    );
    assert!(
        refused.stderr.contains("--operator-url"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty(), "{}", refused.stdout);
    assert!(effects(&db.pool).await.is_empty());

    let run = certify_on(
        &agent_url,
        &[],
        &["--staging", "--operator-url", &operator_url],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let made = effects(&db.pool).await;
    assert!(made.len() >= 8, "{made:?}");
    for effect in &made {
        assert_eq!(effect.requested_by, CERTIFY_REQUESTED_BY, "{effect:?}");
        assert!(
            !["pending", "unknown", "held"].contains(&effect.state.as_str()),
            "{effect:?}"
        );
    }
    let roles: Vec<String> = sqlx::query_scalar(
        "select distinct db_role from ledger.audit_log where action in ('resolve', 'cancel')",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(roles, vec![operator.name.clone()]);
}

#[tokio::test]
async fn what_a_run_cannot_settle_is_named_with_the_commands_an_operator_runs() {
    let db = common::test_db().await;
    // An operator login, but on another ledger: it sees none of the run.
    let elsewhere = common::test_db().await;
    let run = certify_on(
        &db.url,
        &[],
        &["--staging", "--operator-url", &elsewhere.url],
    )
    .await;
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    for check in CHECKED {
        assert!(run.line(check).starts_with("[held]"), "{}", run.line(check));
    }
    let id = run.run_id();
    assert!(
        run.stdout.contains("settled 0 effect(s) it left open"),
        "{}",
        run.stdout
    );
    // Still open, and shown, but as certification's, never the gateway's.
    let unknown = pane_keys(&db.pool, "unknown_outcomes").await;
    assert_eq!(
        unknown,
        vec![format!("refund:CERT-certify-{id}-lost:1500")],
        "{}",
        run.stderr
    );
    let requesters: Vec<String> =
        sqlx::query_scalar("select distinct requested_by from ledger.effects")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(requesters, vec![CERTIFY_REQUESTED_BY.to_string()]);
    assert!(
        run.stderr.contains(&format!(
            "2 effect(s) of certification run {id} could not be settled"
        )),
        "{}",
        run.stderr
    );
    // The tool acted both times and answered with its reference.
    for case in ["lost", "crash"] {
        let command =
            format!("effectwatch resolve 'refund:CERT-certify-{id}-{case}:1500' --succeeded 'fx_");
        assert!(run.stderr.contains(&command), "{command}\n{}", run.stderr);
        let command = format!("--reason 'certification run {id}: staging effect'");
        assert!(run.stderr.contains(&command), "{command}\n{}", run.stderr);
    }
    assert!(run.stderr.contains("still open"), "{}", run.stderr);
}
