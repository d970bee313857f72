//! The rig of the settling tests: a fresh ledger, a fake provider on
//! 127.0.0.1 with fault injection, and settlers connected as the real
//! `effect_operator` role, so every test also proves the grants suffice.
#![allow(dead_code)] // each test file uses its own part of the rig

use effectwatch::ledger::LedgerPool;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use effectwatch::config::Config;
use effectwatch::fakeprovider::{FakeProvider, NewEffect};
use effectwatch::ledger::history;
use effectwatch::ledger::reconciler::LeaseTerms;
use effectwatch::ledger::writer::{self, Completion, Intent, Outcome};
use effectwatch::ledger::{Decision, Effect};
use effectwatch::reconciler::{Reconciler, ReconcilerSettings};
use effectwatch::settle::Settler;
use serde_json::json;
use sqlx::Executor;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::common::{TestDb, test_db};

/// How long the fake provider may take before a call is abandoned.
pub const PROVIDER_TIMEOUT_MS: u64 = 400;

pub struct Rig {
    pub db: TestDb,
    pub fake: FakeProvider,
    pub base_url: String,
    pub config: Arc<Config>,
    pub operator_pool: LedgerPool,
}

impl Rig {
    pub async fn new() -> Rig {
        Rig::with_sinks(None).await
    }

    /// `sinks`: TOML for `[sinks.…]` in place of the default webhook
    /// `ops` (use `{base}` for the fake's URL).
    pub async fn with_sinks(sinks: Option<&str>) -> Rig {
        let db = test_db().await;
        let (fake, base_url) = FakeProvider::start()
            .await
            .expect("starting the fake provider");
        fake.set_hang_limit(Duration::from_secs(5));
        let default_sinks = format!(
            "[sinks.ops]\nkind = \"webhook\"\nurl = \"{base_url}/hooks/ops\"\ntimeout_ms = {PROVIDER_TIMEOUT_MS}\n\
             retry = {{ base_ms = 20, max_secs = 1 }}\n"
        );
        let sinks = sinks
            .map(|text| text.replace("{base}", &base_url))
            .unwrap_or(default_sinks);
        let text = format!(
            "{}\n{sinks}",
            fake.provider_toml("pay", PROVIDER_TIMEOUT_MS)
        );
        let config = Arc::new(Config::from_toml(&text).expect("the rig's config parses"));
        let operator_pool = role_pool(&db, "effect_operator").await;
        Rig {
            db,
            fake,
            base_url,
            config,
            operator_pool,
        }
    }

    pub fn settler(&self, operator: &str) -> Settler {
        Settler::new(
            self.operator_pool.clone(),
            self.config.clone(),
            operator,
            false,
        )
    }

    /// A reconciler settling as `settings.name`, connected as an operator.
    pub fn reconciler(&self, settings: ReconcilerSettings) -> Reconciler {
        Reconciler::new(
            self.settler(&settings.name),
            self.operator_pool.clone(),
            settings,
        )
    }

    /// An agent records an intent to refund, claims it, calls the provider
    /// and never hears back: the effect is unknown.
    pub async fn unknown_effect(&self, op_key: &str, amount_minor: i64) {
        self.begin_and_dispatch(op_key, amount_minor).await;
        self.time_out(op_key).await;
    }

    /// An unknown effect whose key the writer API would refuse (control or
    /// format characters), as a ledger may still hold one.
    pub async fn hostile_unknown_effect(&self, op_key: &str, amount_minor: i64) {
        let begun =
            crate::common::force_effect(&self.db.pool, &Self::intent(op_key, amount_minor)).await;
        assert_eq!(begun, Decision::Proceed);
        self.dispatch(op_key).await;
        self.time_out(op_key).await;
    }

    async fn time_out(&self, op_key: &str) {
        writer::complete_effect(
            &self.db.pool,
            op_key,
            Outcome::Unknown,
            &Completion {
                reason: Some("provider timed out".into()),
                worker: Some("agent-7".into()),
                ..Completion::default()
            },
        )
        .await
        .expect("completing as unknown");
    }

    pub async fn begin_and_dispatch(&self, op_key: &str, amount_minor: i64) {
        let begun = writer::begin_effect(&self.db.pool, &Self::intent(op_key, amount_minor))
            .await
            .expect("begin_effect");
        assert_eq!(begun.decision, Decision::Proceed);
        self.dispatch(op_key).await;
    }

    async fn dispatch(&self, op_key: &str) {
        let claim = writer::mark_dispatched(&self.db.pool, op_key, None, "agent-7")
            .await
            .expect("mark_dispatched");
        assert!(claim.claimed);
    }

    pub fn intent(op_key: &str, amount_minor: i64) -> Intent {
        Intent {
            op_key: op_key.into(),
            action: "refund".into(),
            target: format!("invoice:{op_key}"),
            params: json!({ "amount_minor": amount_minor, "currency": "EUR" }),
            requested_by: "agent-7".into(),
            amount_minor: Some(amount_minor),
            currency: Some("EUR".into()),
            provider: Some("pay".into()),
            ..Intent::default()
        }
    }

    /// The provider performs the agent's request (as if the agent's call landed).
    pub fn provider_did(&self, op_key: &str, amount_minor: i64) -> String {
        self.fake
            .insert_effect(NewEffect {
                kind: "refund".into(),
                amount_minor: Some(amount_minor),
                currency: Some("EUR".into()),
                target: Some(format!("invoice:{op_key}")),
                idempotency_key: Some(op_key.into()),
                metadata: json!({ "op_key": op_key }),
                reverses: None,
            })
            .id
    }

    /// A refund that happened and is recorded as succeeded with its reference.
    pub async fn succeeded_effect(&self, op_key: &str, amount_minor: i64) -> String {
        self.begin_and_dispatch(op_key, amount_minor).await;
        let id = self.provider_did(op_key, amount_minor);
        writer::complete_effect(
            &self.db.pool,
            op_key,
            Outcome::Succeeded,
            &Completion {
                external_ref: Some(id.clone()),
                worker: Some("agent-7".into()),
                ..Completion::default()
            },
        )
        .await
        .expect("completing as succeeded");
        id
    }

    pub async fn effect(&self, op_key: &str) -> Effect {
        history::find_effect(&self.db.pool, op_key)
            .await
            .expect("reading the effect")
            .unwrap_or_else(|| panic!("no effect {op_key}"))
    }

    /// The key of the effect `op_key` is held by, if any.
    pub async fn holder_of(&self, op_key: &str) -> Option<String> {
        sqlx::query_scalar(
            "select h.op_key from ledger.effects e join ledger.effects h on h.id = e.held_by
              where e.op_key = $1",
        )
        .bind(op_key)
        .fetch_optional(&self.db.pool)
        .await
        .expect("reading the holder")
    }

    pub async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&self.db.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Everything the ledger wrote: a refused action must leave this unchanged.
    pub async fn footprint(&self) -> (i64, i64, i64, i64, i64, i64) {
        let row: (i64, i64, i64, i64, i64, i64) = sqlx::query_as(
            "select (select count(*) from ledger.audit_log),
                    (select count(*) from ledger.effects),
                    (select coalesce(sum(version), 0)::bigint from ledger.effects),
                    (select count(*) from ledger.reconciliations),
                    (select count(*) from ledger.escalations),
                    (select count(*) from ledger.compensation_requests)",
        )
        .fetch_one(&self.db.pool)
        .await
        .expect("reading the footprint");
        row
    }

    pub async fn audit_intact(&self) {
        let report = effectwatch::ledger::audit::verify(&self.db.pool)
            .await
            .expect("verify");
        assert!(report.is_intact(), "audit chain broken: {report:?}");
    }
}

/// A pool whose connections act as `role`, like a console logged in as a
/// member of it.
pub async fn role_pool(db: &TestDb, role: &'static str) -> LedgerPool {
    let options = PgConnectOptions::from_str(&db.url)
        .expect("test database URL")
        .application_name("effectwatch-settle-test");
    PgPoolOptions::new()
        .max_connections(8)
        .after_connect(move |connection, _| {
            Box::pin(async move {
                let statement = match role {
                    "effect_readonly" => "set role effect_readonly",
                    "effect_agent" => "set role effect_agent",
                    "effect_approver" => "set role effect_approver",
                    _ => "set role effect_operator",
                };
                connection.execute(statement).await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .expect("connecting as a role")
        .into()
}

/// A reconciler for tests: no grace, a millisecond's backoff, a person
/// asked after three tries.
pub fn reconciler_settings(name: &str) -> ReconcilerSettings {
    ReconcilerSettings {
        name: name.to_string(),
        terms: LeaseTerms {
            lease: Duration::from_secs(60),
            grace: Duration::from_secs(0),
            batch: 50,
        },
        interval: Duration::from_millis(50),
        backoff: Duration::from_millis(1),
        backoff_max: Duration::from_millis(1),
        escalate_after: 3,
        sink: None,
        concurrency: 4,
    }
}
