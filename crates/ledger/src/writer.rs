//! Rust callers of the writer API (the simulated agents, tests, benchmarks).
//! Everything goes through the SQL functions, exactly as any other agent.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;
use sqlx::postgres::types::PgInterval;

use super::{Decision, LedgerError, State};

/// The intent an agent records before it acts.
#[derive(Debug, Clone, Default)]
pub struct Intent {
    pub op_key: String,
    pub action: String,
    pub target: String,
    pub params: Value,
    pub requested_by: String,
    pub pending_window_secs: Option<i64>,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub provider: Option<String>,
    pub approval_ref: Option<String>,
    pub approval_version: Option<i32>,
    pub request_id: Option<String>,
    /// A booking's time range, `[start, end)`, for an action whose policy
    /// conflicts by time range.
    pub during: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Begun {
    pub decision: Decision,
    pub effect_id: i64,
    pub state: State,
    pub result: Option<Value>,
}

/// What a caller is told when the key is another caller's
/// ([`Decision::Refused`]): a sentence a person or a model can act on,
/// naming nothing of the effect.
pub const NOT_YOURS: &str = "this key belongs to another caller: nothing was done now, and nothing of its effect \
     is told. Do not retry it; make the key from your own business arguments, or ask an operator";

/// `ledger.begin_effect`'s row as it comes: a refusal has no effect id and
/// no state.
#[derive(sqlx::FromRow)]
struct Answer {
    decision: Option<Decision>,
    effect_id: Option<i64>,
    state: Option<State>,
    result: Option<Value>,
}

impl Answer {
    /// The answer, or `None` for a refusal.
    fn begun(self) -> Result<Option<Begun>, LedgerError> {
        match (self.decision, self.effect_id, self.state) {
            (None | Some(Decision::Refused), _, _) => Ok(None),
            (Some(decision), Some(effect_id), Some(state)) => Ok(Some(Begun {
                decision,
                effect_id,
                state,
                result: self.result,
            })),
            (Some(decision), _, _) => Err(LedgerError::Database(format!(
                "begin_effect answered {decision:?} without an effect id or a state"
            ))),
        }
    }
}

/// The call of `ledger.begin_effect` with an [`Intent`]'s fields as `$1`…`$14`
/// (bound by [`bind_intent!`]).
macro_rules! begin_call {
    () => {
        "ledger.begin_effect(
            op_key => $1, action => $2, target => $3, params => $4, requested_by => $5,
            pending_window => make_interval(secs => $6::bigint), amount_minor => $7, currency => $8,
            provider => $9, approval_ref => $10, approval_version => $11, request_id => $12,
            during => case when $13::timestamptz is not null then tstzrange($13, $14) end)"
    };
}

macro_rules! bind_intent {
    ($query:expr, $intent:expr) => {{
        let intent: &Intent = $intent;
        $query
            .bind(&intent.op_key)
            .bind(&intent.action)
            .bind(&intent.target)
            .bind(&intent.params)
            .bind(&intent.requested_by)
            .bind(intent.pending_window_secs)
            .bind(intent.amount_minor)
            .bind(&intent.currency)
            .bind(&intent.provider)
            .bind(&intent.approval_ref)
            .bind(intent.approval_version)
            .bind(&intent.request_id)
            .bind(intent.during.map(|(start, _)| start))
            .bind(intent.during.map(|(_, end)| end))
    }};
}

/// Begins `intent`. A key that is another caller's (another login, outside
/// its tenant) is [`LedgerError::Refused`] with [`NOT_YOURS`]: the ledger
/// answers [`Decision::Refused`] and tells nothing of the effect.
pub async fn begin_effect<'c>(
    executor: impl PgExecutor<'c>,
    intent: &Intent,
) -> Result<Begun, LedgerError> {
    let answer = bind_intent!(
        sqlx::query_as::<_, Answer>(concat!(
            "select decision, effect_id, state, result from ",
            begin_call!()
        )),
        intent
    )
    .fetch_one(executor)
    .await?;
    answer
        .begun()?
        .ok_or_else(|| LedgerError::Refused(NOT_YOURS.to_string()))
}

/// What [`begin_effect_as_requester`] answers.
#[derive(Debug, Clone, PartialEq)]
pub enum RequesterAnswer {
    /// The ledger's answer to this caller.
    Begun(Begun),
    /// The key is another caller's — of this login, or another login's:
    /// nothing of it is told, nothing was done.
    Refused,
    /// Another caller of the login made the key while this one asked, and
    /// the ledger answered this call with a retry, reopening that caller's
    /// failed effect: refused, and the caller must put the effect back as
    /// it was (failed, retryable) with [`complete_effect`].
    RefusedReopened,
}

#[derive(sqlx::FromRow)]
struct RequesterRow {
    #[sqlx(flatten)]
    answer: Answer,
    taken_meanwhile: bool,
}

/// [`begin_effect`] for one of the callers a login serves and names in
/// `requested_by` (the gateway's): a key the login made under another
/// `requested_by` is refused before `begin_effect` is called — whose retry
/// would reopen the other caller's failed effect — and the call is kept,
/// flagged (`ledger.refused_to_requester`). An answer about a key another
/// caller made while this one was asking is refused the same way.
pub async fn begin_effect_as_requester<'c>(
    executor: impl PgExecutor<'c>,
    intent: &Intent,
) -> Result<RequesterAnswer, LedgerError> {
    // One statement: the refusal is asked first, and begin_effect is
    // called only when it says no (a CASE evaluates only the branch it
    // takes; OFFSET 0 keeps the answer computed once). Any answer but a
    // new key's asks again, for a key made meanwhile.
    let row = bind_intent!(
        sqlx::query_as::<_, RequesterRow>(concat!(
            "select (a.answer).decision as decision, (a.answer).effect_id as effect_id,
                    (a.answer).state as state, (a.answer).result as result,
                    case when (a.answer).decision is null
                              or (a.answer).decision in ('proceed', 'overlap', 'refused') then false
                         else ledger.refused_to_requester($1, $5, $12) end as taken_meanwhile
               from (select case when ledger.refused_to_requester($1, $5, $12) then null
                                 else ",
            begin_call!(),
            " end as answer
                     offset 0) a"
        )),
        intent
    )
    .fetch_one(executor)
    .await?;
    let reopened = row.answer.decision == Some(Decision::Retry);
    Ok(match row.answer.begun()? {
        None => RequesterAnswer::Refused,
        Some(_) if row.taken_meanwhile && reopened => RequesterAnswer::RefusedReopened,
        Some(_) if row.taken_meanwhile => RequesterAnswer::Refused,
        Some(begun) => RequesterAnswer::Begun(begun),
    })
}

/// A term of a rejected call that differs from the recorded effect's.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Difference {
    /// `action`, `target`, `amount_minor`, `currency`, `provider` or `params.<name>`.
    pub field: String,
    pub recorded: Value,
    pub now: Value,
}

/// What [`begin_and_dispatch`] answers a caller the key is answered to.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub begun: Begun,
    /// Whether this call claimed the effect: only then may it call the
    /// provider. `false` with a `proceed` or `retry`: another caller
    /// claimed it first, and `begun.state` is what the claim saw.
    pub dispatched: bool,
    /// For [`Decision::Rejected`]: what this call changed, field by field.
    pub differences: Vec<Difference>,
    /// The heartbeat lease this call is held to, when it asked for one and
    /// claimed the effect: its own, or the one its action's policy sets.
    /// Beat every third of it.
    pub heartbeat_lease: Option<std::time::Duration>,
}

#[derive(sqlx::FromRow)]
struct DispatchAnswer {
    #[sqlx(flatten)]
    answer: Answer,
    dispatched: Option<bool>,
    refused: Option<String>,
    differences: Option<sqlx::types::Json<Vec<Difference>>>,
    heartbeat_lease_secs: Option<f64>,
}

/// [`begin_effect`] and, when it lets the caller run, [`mark_dispatched`]
/// in one transaction and one round trip: for a caller that calls the
/// provider at once. `None`: the key is another caller's and nothing of
/// it is told. `as_requester`: [`begin_effect_as_requester`]'s rule, for
/// one login serving callers it names in `requested_by`.
pub async fn begin_and_dispatch<'c>(
    executor: impl PgExecutor<'c>,
    intent: &Intent,
    worker: &str,
    as_requester: bool,
    heartbeat_lease: Option<std::time::Duration>,
) -> Result<Option<Started>, LedgerError> {
    let heartbeat_lease = heartbeat_lease.map(lease_interval).transpose()?;
    let row = bind_intent!(
        sqlx::query_as::<_, DispatchAnswer>(
            "select decision, effect_id, state, result, dispatched, refused, differences,
                    extract(epoch from lease_in_force)::float8 as heartbeat_lease_secs
               from ledger.begin_and_dispatch(
                op_key => $1, action => $2, target => $3, params => $4, requested_by => $5,
                pending_window => make_interval(secs => $6::bigint), amount_minor => $7, currency => $8,
                provider => $9, approval_ref => $10, approval_version => $11, request_id => $12,
                during => case when $13::timestamptz is not null then tstzrange($13, $14) end,
                worker => $15, as_requester => $16, heartbeat_lease => $17)"
        ),
        intent
    )
    .bind(worker)
    .bind(as_requester)
    .bind(heartbeat_lease)
    .fetch_one(executor)
    .await?;
    refusal(row.refused)?;
    Ok(row.answer.begun()?.map(|begun| Started {
        begun,
        dispatched: row.dispatched.unwrap_or(false),
        differences: row.differences.map(|json| json.0).unwrap_or_default(),
        heartbeat_lease: row
            .heartbeat_lease_secs
            .map(std::time::Duration::from_secs_f64),
    }))
}

#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    /// Only a caller that claimed the effect may call the provider.
    pub claimed: bool,
    pub state: State,
    pub deadline_at: Option<DateTime<Utc>>,
}

/// The ledger keeps a refused call (another login's effect, a compensation)
/// as a flagged attempt and answers with the reason instead of an error, so
/// the record survives; a Rust caller gets the refusal as an error.
fn refusal(refused: Option<String>) -> Result<(), LedgerError> {
    match refused {
        Some(reason) => Err(LedgerError::Refused(reason)),
        None => Ok(()),
    }
}

pub async fn mark_dispatched<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    request_id: Option<&str>,
    worker: &str,
) -> Result<Dispatch, LedgerError> {
    claim(executor, op_key, None, request_id, worker).await
}

/// [`mark_dispatched`] naming the effect's target too: refused when the key
/// is another target's, and routable on a ledger distributed by target
/// (docs/scale.md).
pub async fn mark_dispatched_on_target<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    target: &str,
    request_id: Option<&str>,
    worker: &str,
) -> Result<Dispatch, LedgerError> {
    claim(executor, op_key, Some(target), request_id, worker).await
}

async fn claim<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    target: Option<&str>,
    request_id: Option<&str>,
    worker: &str,
) -> Result<Dispatch, LedgerError> {
    let (dispatch, refused) =
        sqlx::query_as::<_, (bool, State, Option<DateTime<Utc>>, Option<String>)>(
            "select claimed, state, deadline_at, refused from ledger.mark_dispatched(
            op_key => $1, request_id => $2, worker => $3, target => $4)",
        )
        .bind(op_key)
        .bind(request_id)
        .bind(worker)
        .bind(target)
        .fetch_one(executor)
        .await
        .map(|(claimed, state, deadline_at, refused)| {
            (
                Dispatch {
                    claimed,
                    state,
                    deadline_at,
                },
                refused,
            )
        })?;
    refusal(refused)?;
    Ok(dispatch)
}

fn lease_interval(lease: std::time::Duration) -> Result<PgInterval, LedgerError> {
    PgInterval::try_from(lease)
        .map_err(|_| LedgerError::Invalid(format!("a heartbeat lease of {lease:?} is too long")))
}

/// What a heartbeat learned.
#[derive(Debug, Clone, PartialEq)]
pub struct Beat {
    /// The call is still the worker's to finish; false when the effect was
    /// completed, or declared lost because an earlier lease ran out.
    pub alive: bool,
    pub state: State,
    pub lease_until: Option<DateTime<Utc>>,
    /// The lease in force: the one asked for, or the one the action's
    /// policy sets. Beat every third of it.
    pub lease_in_force: Option<std::time::Duration>,
}

/// The worker running `op_key`'s provider call is alive: its lease runs
/// `lease` from now. Beat every third of the lease or so while the call
/// runs; when the beats stop for longer than the lease, the effect is
/// unknown (worker_lost) and the reconciler takes it up.
pub async fn heartbeat<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    lease: std::time::Duration,
    worker: &str,
) -> Result<Beat, LedgerError> {
    let lease = lease_interval(lease)?;
    let (alive, state, lease_until, in_force) =
        sqlx::query_as::<_, (bool, State, Option<DateTime<Utc>>, Option<f64>)>(
            "select alive, state, lease_until, extract(epoch from lease_in_force)::float8
           from ledger.heartbeat(op_key => $1, lease => $2, worker => $3)",
        )
        .bind(op_key)
        .bind(lease)
        .bind(worker)
        .fetch_one(executor)
        .await?;
    Ok(Beat {
        alive,
        state,
        lease_until,
        lease_in_force: in_force.map(std::time::Duration::from_secs_f64),
    })
}

/// The state of the effect under `op_key` now, as this login may read it
/// (`None`: no such effect, or another login's).
pub async fn state_of<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
) -> Result<Option<State>, LedgerError> {
    Ok(
        sqlx::query_scalar::<_, State>("select state from ledger.effects where op_key = $1")
            .bind(op_key)
            .fetch_optional(executor)
            .await?,
    )
}

/// The outcome a worker observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed { retryable: bool },
    Unknown,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed { .. } => "failed",
            Outcome::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Completion {
    pub external_ref: Option<String>,
    pub result: Option<Value>,
    pub reason: Option<String>,
    pub request_id: Option<String>,
    pub worker: Option<String>,
    /// What kind of error the worker saw, if any: the ledger holds the
    /// outcome to what the class allows (a timeout is never a failure).
    pub error_class: Option<ErrorClass>,
    /// With [`ErrorClass::RateLimited`]: the provider's delay (default 1 min).
    pub retry_after: Option<std::time::Duration>,
    /// The effect's target, when the worker knows it: a key that is
    /// another target's is refused, and the call is routable on a ledger
    /// distributed by target.
    pub target: Option<String>,
}

/// The error classes of the writer API (`ledger.outcome_of_class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Timeout, reset, 5xx, unreadable answer: the outcome is unknown.
    Timeout,
    ConnectionReset,
    ServerError,
    InvalidResponse,
    /// The provider refused these params: failed for good.
    BusinessRejection,
    /// Retryable under the same key after the provider's delay.
    RateLimited,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Timeout => "timeout",
            ErrorClass::ConnectionReset => "connection_reset",
            ErrorClass::ServerError => "server_error",
            ErrorClass::InvalidResponse => "invalid_response",
            ErrorClass::BusinessRejection => "business_rejection",
            ErrorClass::RateLimited => "rate_limited",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Completed {
    pub applied: bool,
    pub state: State,
    /// The effect had been settled another way: recorded and flagged only.
    pub late: bool,
}

pub async fn complete_effect<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
    outcome: Outcome,
    completion: &Completion,
) -> Result<Completed, LedgerError> {
    let retryable = match outcome {
        Outcome::Failed { retryable } => Some(retryable),
        _ => None,
    };
    let (completed, refused) = sqlx::query_as::<_, (bool, State, bool, Option<String>)>(
        "select applied, state, late, refused from ledger.complete_effect(
            op_key => $1, outcome => $2, external_ref => $3, result => $4, retryable => $5,
            reason => $6, request_id => $7, worker => $8, error_class => $9,
            retry_after => $10, target => $11)",
    )
    .bind(op_key)
    .bind(outcome.as_str())
    .bind(&completion.external_ref)
    .bind(&completion.result)
    .bind(retryable)
    .bind(&completion.reason)
    .bind(&completion.request_id)
    .bind(&completion.worker)
    .bind(completion.error_class.map(ErrorClass::as_str))
    .bind(completion.retry_after)
    .bind(&completion.target)
    .fetch_one(executor)
    .await
    .map(|(applied, state, late, refused)| {
        (
            Completed {
                applied,
                state,
                late,
            },
            refused,
        )
    })?;
    refusal(refused)?;
    Ok(completed)
}
