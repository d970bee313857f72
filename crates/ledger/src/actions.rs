//! Operator actions: each one SQL function call, in one transaction with its
//! audit entry, refused if the effect changed since the operator looked.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;
use sqlx::PgExecutor;

use super::{LedgerError, State};

/// The version of the effect the operator saw when deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenVersion(pub i64);

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ActionOutcome {
    pub state: State,
    pub version: i64,
    pub audit_seq: i64,
}

/// How an operator settles an effect by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Succeeded { external_ref: String },
    Failed { retryable: bool },
}

pub async fn resolve<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: SeenVersion,
    operator: &str,
    reason: &str,
    resolution: &Resolution,
) -> Result<ActionOutcome, LedgerError> {
    let (outcome, external_ref, retryable) = match resolution {
        Resolution::Succeeded { external_ref } => ("succeeded", Some(external_ref.as_str()), false),
        Resolution::Failed { retryable } => ("failed", None, *retryable),
    };
    Ok(sqlx::query_as::<_, ActionOutcome>(
        "select state, version, audit_seq from ledger.op_resolve(
            op_key => $1, expected_version => $2, operator => $3, reason => $4,
            outcome => $5, external_ref => $6, retryable => $7)",
    )
    .bind(op_key)
    .bind(seen.0)
    .bind(operator)
    .bind(reason)
    .bind(outcome)
    .bind(external_ref)
    .bind(retryable)
    .fetch_one(executor)
    .await?)
}

/// An operator action of the common shape: one SQL function taking the key,
/// the version the operator saw, the operator and a reason, answering the
/// effect's state and version and the audit entry. Each constant below is
/// the ledger's side of one such action; its verb (`settle::verbs`) says
/// how an operator asks for it.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct OperatorCall {
    /// Its name as the command line spells it (the audit trail writes it
    /// with underscores, as its SQL function does).
    pub name: &'static str,
    /// The past tense, for what a report says happened.
    pub done: &'static str,
    /// The SQL function: `(op_key, expected_version, operator, reason)`.
    function: &'static str,
}

pub const RELEASE: OperatorCall = OperatorCall {
    name: "release",
    done: "released",
    function: "ledger.op_release",
};

pub const CANCEL: OperatorCall = OperatorCall {
    name: "cancel",
    done: "cancelled",
    function: "ledger.op_cancel",
};

pub const ANNOTATE: OperatorCall = OperatorCall {
    name: "annotate",
    done: "annotated",
    function: "ledger.op_annotate",
};

pub const ACKNOWLEDGE_DUPLICATES: OperatorCall = OperatorCall {
    name: "acknowledge-duplicates",
    done: "acknowledged the repeated calls of",
    function: "ledger.op_acknowledge_duplicates",
};

pub const REOPEN_DUPLICATES: OperatorCall = OperatorCall {
    name: "reopen-duplicates",
    done: "reopened the repeated calls of",
    function: "ledger.op_reopen_duplicates",
};

impl OperatorCall {
    pub const fn function(&self) -> &'static str {
        self.function
    }

    pub async fn call<'c>(
        &self,
        executor: impl PgExecutor<'c>,
        op_key: &str,
        seen: SeenVersion,
        operator: &str,
        reason: &str,
    ) -> Result<ActionOutcome, LedgerError> {
        // Positional: the functions name their text argument reason or note.
        let sql = format!(
            "select state, version, audit_seq from {}($1, $2, $3, $4)",
            self.function
        );
        Ok(sqlx::query_as::<_, ActionOutcome>(sqlx::AssertSqlSafe(sql))
            .bind(op_key)
            .bind(seen.0)
            .bind(operator)
            .bind(reason)
            .fetch_one(executor)
            .await?)
    }
}

/// The operator actions that do not apply to one effect as it is now, each
/// with the ledger's sentence saying why (`ledger.refusals`): the console
/// greys their keys and refuses them before asking anything. The actions
/// are named as their SQL functions are, without `op_`.
pub type Refusals = BTreeMap<String, String>;

/// What the ledger says an operator may do with one effect now, read with
/// the rows the console shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Applicability {
    pub refused: Refusals,
    /// The approval limit of its action's compensations, in minor units of `currency`.
    pub approval_limit_minor: Option<i64>,
    pub currency: Option<String>,
    /// Compensating it now would wait for a second operator (`ledger.compensation_approval`).
    pub compensation_waits_for_approval: bool,
}

/// The applicability of each of these effects, in one query.
pub async fn applicability<'c>(
    executor: impl PgExecutor<'c>,
    op_keys: &[String],
) -> Result<HashMap<String, Applicability>, LedgerError> {
    type Read = (
        String,
        sqlx::types::Json<Refusals>,
        Option<i64>,
        Option<String>,
        bool,
    );
    let rows: Vec<Read> = sqlx::query_as(
        "select e.op_key, r.refused, a.limit_minor, e.currency, a.waits
           from ledger.refusals($1) r
           join ledger.effects e on e.op_key = r.op_key
          cross join lateral ledger.compensation_approval(e) a",
    )
    .bind(op_keys)
    .fetch_all(executor)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(op_key, refused, approval_limit_minor, currency, waits)| {
            let applicability = Applicability {
                refused: refused.0,
                approval_limit_minor,
                currency,
                compensation_waits_for_approval: waits,
            };
            (op_key, applicability)
        })
        .collect())
}

/// What a provider said about an effect, as stored by `record_reconciliation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub provider: String,
    pub finding: String,
    pub external_refs: Vec<String>,
    pub evidence: Value,
    pub duration_ms: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ReconciliationOutcome {
    pub state: State,
    pub version: i64,
    pub reconciliation_id: i64,
    pub audit_seq: i64,
    /// What the ledger recorded: the provider's finding, or a narrower one
    /// (an `absent` inside the call's window is `indeterminate`).
    pub finding: String,
}

pub async fn record_reconciliation<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    seen: SeenVersion,
    operator: &str,
    finding: &Finding,
) -> Result<ReconciliationOutcome, LedgerError> {
    Ok(sqlx::query_as::<_, ReconciliationOutcome>(
        "select state, version, reconciliation_id, audit_seq, recorded_finding as finding from ledger.record_reconciliation(
            op_key => $1, expected_version => $2, operator => $3, provider => $4, finding => $5,
            external_refs => $6, evidence => $7, duration_ms => $8)",
    )
    .bind(op_key)
    .bind(seen.0)
    .bind(operator)
    .bind(&finding.provider)
    .bind(&finding.finding)
    .bind(&finding.external_refs)
    .bind(&finding.evidence)
    .bind(finding.duration_ms)
    .fetch_one(executor)
    .await?)
}
