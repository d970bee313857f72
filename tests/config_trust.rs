//! The config file is checked whole before any command runs, and no
//! credential written in a URL reaches the ledger: a URL with user
//! information or a literal credential parameter is refused, and the
//! request stored as evidence never carries one, whatever the config.

mod common;
mod settle_support;

use std::process::Output;
use std::sync::Arc;

use effectwatch::config::Config;
use effectwatch::ledger::writer::{self, Completion, Intent, Outcome};
use effectwatch::settle::verbs::{self, Answers};
use effectwatch::settle::{Request, Settler};
use serde_json::json;
use settle_support::{PROVIDER_TIMEOUT_MS, Rig};

const BIN: &str = env!("CARGO_BIN_EXE_effectwatch");
/// Nothing listens here: a command that got as far as connecting would exit 4.
const NO_DATABASE: &str = "postgres://postgres@127.0.0.1:1/postgres";

fn effectwatch(config: &str, args: &[&str]) -> (Output, tempfile::NamedTempFile) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), config).unwrap();
    let output = std::process::Command::new(BIN)
        .arg("--config")
        .arg(file.path())
        .args(["--database-url", NO_DATABASE])
        .args(args)
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (output, file)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A literal Authorization header, an unknown placeholder and a sink with
/// no URL: three problems that used to surface only when used.
const BROKEN: &str = r#"
[providers.pay]
kind = "http"
base_url = "http://127.0.0.1:9"
headers.Authorization = "Bearer abc123"
[[providers.pay.lookup]]
path = "/v1/effects/{nosuch}"
[sinks.ops]
kind = "webhook"
"#;

#[test]
fn every_command_refuses_a_config_with_problems() {
    for args in [
        &["list", "overdue"][..],
        &["show", "k"],
        &["reconcile", "k"],
    ] {
        let (run, file) = effectwatch(BROKEN, args);
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(3), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        let expected = format!(
            "effectwatch: config {}: 3 problems: ",
            file.path().display()
        );
        assert!(stderr.starts_with(&expected), "{args:?}: {stderr}");
        for needle in [
            "provider pay: header Authorization looks like a credential",
            "provider pay: lookup[0]: unknown placeholder {nosuch}",
            "sink ops: set exactly one of url and url_env",
        ] {
            assert!(stderr.contains(needle), "{args:?}: {needle}: {stderr}");
        }
        assert!(!stderr.contains("abc123"), "{stderr}");
        assert!(run.stdout.is_empty(), "{args:?}: {}", text(&run.stdout));
    }
}

#[test]
fn the_config_command_lists_every_problem_on_its_own_line() {
    let (run, file) = effectwatch(BROKEN, &["config"]);
    assert_eq!(run.status.code(), Some(3), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    assert!(
        stdout.contains(&file.path().display().to_string()),
        "{stdout}"
    );
    let problems: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("  provider ") || line.starts_with("  sink "))
        .collect();
    assert_eq!(problems.len(), 3, "{stdout}");
}

/// Settings every command used to start with and fail on later, or run on silently
/// without the bound they seemed to set: each is one clear line at start, exit 3.
#[test]
fn every_command_refuses_settings_it_cannot_run_on() {
    let unwritable_log = tempfile::tempdir().unwrap();
    let log_in_a_file = unwritable_log.path().join("a-file");
    std::fs::write(&log_in_a_file, "").unwrap();
    let cases = [
        ("theme = \"nosuch\"\n".to_string(), "no theme \"nosuch\""),
        (
            "statement_timeout_secs = 0\n".to_string(),
            "statement_timeout_secs must be between 1 and",
        ),
        (
            "replica_lag_stale_secs = -5.0\n".to_string(),
            "replica_lag_stale_secs must be",
        ),
        (
            "[notifications]\nmin_interval_secs = -30\n".to_string(),
            "expected u64",
        ),
        (
            format!(
                "log_file = \"{}\"\n",
                log_in_a_file.join("effectwatch.log").display()
            ),
            "cannot write the log file",
        ),
        (
            "[sinks.pd]\nkind = \"pagerduty\"\nrouting_key_env = \"EFFECTWATCH_TEST_SURELY_UNSET\"\n"
                .to_string(),
            "sink pd: environment variable EFFECTWATCH_TEST_SURELY_UNSET (for routing_key_env) is not set",
        ),
        (
            r#"
[providers.pay]
kind = "http"
base_url = "http://127.0.0.1:9"
headers.Authorization = { env = "EFFECTWATCH_TEST_SURELY_UNSET", prefix = "Bearer " }
[[providers.pay.lookup]]
path = "/v1/effects/{external_ref}"
"#
            .to_string(),
            "provider pay: environment variable EFFECTWATCH_TEST_SURELY_UNSET (for header Authorization) is not set",
        ),
    ];
    for (config, needle) in &cases {
        for args in [
            &["list", "overdue"][..],
            &["show", "k"],
            &["reconcile", "k"],
        ] {
            let (run, _file) = effectwatch(config, args);
            let stderr = text(&run.stderr);
            assert_eq!(run.status.code(), Some(3), "{config}{args:?}: {stderr}");
            assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
            assert!(stderr.contains(needle), "{config}{args:?}: {stderr}");
        }
        let (run, _file) = effectwatch(config, &["config"]);
        assert_eq!(
            run.status.code(),
            Some(3),
            "{config}: {}",
            text(&run.stderr)
        );
        let listed = text(&run.stdout) + &text(&run.stderr);
        assert!(listed.contains(needle), "{config}: {listed}");
    }
}

#[test]
fn credentials_in_a_url_are_refused_without_being_echoed() {
    for config in [
        "[providers.pay]\nkind = \"http\"\nbase_url = \"http://user:SUPERSECRET6@127.0.0.1:18080\"\n",
        "[providers.pay]\nkind = \"http\"\nbase_url = \"http://127.0.0.1:18080\"\n\
         [[providers.pay.lookup]]\npath = \"/v1/effects\"\nquery = { access_token = \"SUPERSECRET6\" }\n",
        "[sinks.ops]\nkind = \"webhook\"\nurl = \"https://hooks.example/x?token=SUPERSECRET6\"\n",
    ] {
        let (run, _file) = effectwatch(config, &["list", "overdue"]);
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(3), "{config}: {stderr}");
        assert!(stderr.contains("credential"), "{stderr}");
        assert!(!stderr.contains("SUPERSECRET6"), "{stderr}");
    }
}

#[tokio::test]
async fn the_request_stored_as_evidence_carries_no_credential() {
    let rig = Rig::new().await;
    let config = format!(
        r#"
[providers.pay]
kind = "http"
base_url = "{}"
timeout_ms = {PROVIDER_TIMEOUT_MS}
[[providers.pay.lookup]]
path = "/v1/effects"
query = {{ idempotency_key = "{{key}}", access_token = "{{params.token}}" }}
effects = "/data"
"#,
        rig.base_url
    );
    let config = Arc::new(Config::from_toml(&config).expect("the config is valid"));
    let op_key = "refund:TRUST-1:v1";
    let intent = Intent {
        op_key: op_key.into(),
        action: "refund".into(),
        target: format!("invoice:{op_key}"),
        params: json!({ "amount_minor": 1500, "currency": "EUR", "token": "SUPERSECRET6" }),
        requested_by: "agent-7".into(),
        amount_minor: Some(1500),
        currency: Some("EUR".into()),
        provider: Some("pay".into()),
        ..Intent::default()
    };
    writer::begin_effect(&rig.db.pool, &intent).await.unwrap();
    writer::mark_dispatched(&rig.db.pool, op_key, None, "agent-7")
        .await
        .unwrap();
    writer::complete_effect(
        &rig.db.pool,
        op_key,
        Outcome::Unknown,
        &Completion::default(),
    )
    .await
    .unwrap();
    rig.provider_did(op_key, 1500);

    let settler = Settler::new(rig.operator_pool.clone(), config, "alice", false);
    let report = settler
        .settle(Request::on_effect(
            &verbs::RECONCILE,
            op_key,
            None,
            Answers::default(),
        ))
        .await
        .expect("reconcile");
    assert!(
        !report.detail.to_string().contains("SUPERSECRET6"),
        "{report:?}"
    );

    let evidence: String =
        sqlx::query_scalar("select evidence::text from ledger.reconciliations where op_key = $1")
            .bind(op_key)
            .fetch_one(&rig.db.pool)
            .await
            .unwrap();
    assert!(!evidence.contains("SUPERSECRET6"), "{evidence}");
    assert!(evidence.contains("access_token=****"), "{evidence}");
    assert!(
        evidence.contains("idempotency_key=refund%3ATRUST-1%3Av1"),
        "{evidence}"
    );
}

/// A provider and a sink that echo the request, credentials included, in their error bodies:
/// what the ledger stores of them (reconciliation evidence, the compensation's result and
/// reason, the escalation's delivery error) carries none of the configured secrets.
#[tokio::test]
async fn secrets_a_provider_echoes_are_masked_in_every_stored_body() {
    const TOKEN: &str = "tok_live_ECHOED_4242";
    const HOOK_KEY: &str = "hook_key_ECHOED_7777";
    // Names only this test uses: nothing else in the process reads or sets them.
    unsafe {
        std::env::set_var("EFFECTWATCH_TEST_ECHO_TOKEN", TOKEN);
        std::env::set_var("EFFECTWATCH_TEST_ECHO_HOOK_KEY", HOOK_KEY);
    }
    let rig = Rig::new().await;
    let provider = rig.fake.provider_toml("pay", PROVIDER_TIMEOUT_MS).replacen(
        "[providers.pay]\n",
        "[providers.pay]\nheaders.Authorization = { env = \"EFFECTWATCH_TEST_ECHO_TOKEN\", prefix = \"Bearer \" }\n",
        1,
    );
    let config = format!(
        "{provider}\n[sinks.ops]\nkind = \"webhook\"\nurl = \"{}/hooks/ops\"\ntimeout_ms = {PROVIDER_TIMEOUT_MS}\n\
         headers = {{ X-Hook-Key = {{ env = \"EFFECTWATCH_TEST_ECHO_HOOK_KEY\" }} }}\n",
        rig.base_url
    );
    let config = Arc::new(Config::from_toml(&config).expect("the config is valid"));
    let settler = Settler::new(rig.operator_pool.clone(), config, "alice", false);

    // Reconciliation: the lookup is refused with the request echoed.
    rig.unknown_effect("refund:ECHO:1", 1500).await;
    rig.fake.fail_next(
        effectwatch::fakeprovider::Route::Lookup,
        effectwatch::fakeprovider::Fault::Echo(400),
    );
    rig.fake.fail_next(
        effectwatch::fakeprovider::Route::Lookup,
        effectwatch::fakeprovider::Fault::Echo(400),
    );
    settler
        .settle(Request::on_effect(
            &verbs::RECONCILE,
            "refund:ECHO:1",
            None,
            Answers::default(),
        ))
        .await
        .expect("reconcile");
    // Escalation: the sink refuses the delivery with the request echoed.
    rig.fake.fail_next(
        effectwatch::fakeprovider::Route::Hook,
        effectwatch::fakeprovider::Fault::Echo(500),
    );
    settler
        .settle(Request::on_effect(
            &verbs::ESCALATE,
            "refund:ECHO:1",
            None,
            Answers {
                sink: None,
                ..Answers::because("nobody can tell")
            },
        ))
        .await
        .expect("escalate");
    // Compensation: the reversal is refused with the request echoed.
    rig.succeeded_effect("refund:ECHO:2", 900).await;
    rig.fake.fail_next(
        effectwatch::fakeprovider::Route::Create,
        effectwatch::fakeprovider::Fault::Echo(422),
    );
    settler
        .settle(Request::on_effect(
            &verbs::COMPENSATE,
            "refund:ECHO:2",
            None,
            Answers::because("refunded twice"),
        ))
        .await
        .expect("compensate");

    let stored: Vec<(String, String)> = sqlx::query_as(
        "select 'evidence', evidence::text from ledger.reconciliations where op_key = 'refund:ECHO:1'
         union all
         select 'delivery error', coalesce(error, '') from ledger.escalation_deliveries
         union all
         select 'compensation', concat_ws(' ', result::text, failure_reason)
           from ledger.effects where compensates is not null
         union all
         select 'versions', string_agg(coalesce(reason, '') || coalesce(failure_reason, ''), ' ')
           from ledger.effect_versions",
    )
    .fetch_all(&rig.db.pool)
    .await
    .unwrap();
    let kinds: Vec<&str> = stored.iter().map(|(kind, _)| kind.as_str()).collect();
    for kind in ["evidence", "delivery error", "compensation"] {
        assert!(
            kinds.contains(&kind),
            "nothing stored as {kind}: {stored:?}"
        );
    }
    let all = format!("{stored:?}");
    assert!(
        all.contains("you_sent") || all.contains("request refused"),
        "the echo was not stored: {all}"
    );
    assert!(!all.contains(TOKEN), "{all}");
    assert!(!all.contains(HOOK_KEY), "{all}");
    assert!(all.contains("****"), "{all}");
}
