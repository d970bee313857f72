//! The shared scenario file (`clients/scenarios.json`, described in
//! `clients/SCENARIOS.md`) run through the Rust writer against a real
//! ledger: the same contract the Python and TypeScript clients run, so the
//! three cannot drift.

mod common;

use std::time::Duration;

use effectwatch::ledger::LedgerPool;
use effectwatch::ledger::writer::{
    Completion, ErrorClass, Intent, Outcome, begin_effect, complete_effect,
    mark_dispatched_on_target,
};
use effectwatch::ledger::{Decision, LedgerError, State};
use serde_json::{Map, Value};
use sqlx::Row;

const SCENARIOS: &str = include_str!("../clients/scenarios.json");

/// Where a divergence happened, for every failure message.
struct Place<'a> {
    scenario: &'a str,
    step: usize,
}

impl Place<'_> {
    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!("scenario {:?}, step {}: {what}", self.scenario, self.step)
    }

    fn same<T: PartialEq + std::fmt::Debug>(&self, field: &str, expected: T, got: T) {
        if expected != got {
            self.fail(format!("{field}: expected {expected:?}, got {got:?}"));
        }
    }
}

fn text(args: &Map<String, Value>, field: &str) -> Option<String> {
    args.get(field).and_then(Value::as_str).map(str::to_string)
}

fn state_named(name: &str, place: &Place) -> State {
    serde_json::from_value(Value::String(name.to_string()))
        .unwrap_or_else(|_| place.fail(format!("no state named {name}")))
}

fn error_class_named(name: &str, place: &Place) -> ErrorClass {
    match name {
        "timeout" => ErrorClass::Timeout,
        "connection_reset" => ErrorClass::ConnectionReset,
        "server_error" => ErrorClass::ServerError,
        "invalid_response" => ErrorClass::InvalidResponse,
        "business_rejection" => ErrorClass::BusinessRejection,
        "rate_limited" => ErrorClass::RateLimited,
        other => place.fail(format!("no error class named {other}")),
    }
}

/// The Rust writer's errors keep the SQLSTATE's meaning, not its code.
fn error_has_sqlstate(error: &LedgerError, sqlstate: &str, place: &Place) -> bool {
    match sqlstate {
        "22023" => matches!(error, LedgerError::Invalid(_)),
        other => place.fail(format!("this runner does not know SQLSTATE {other}")),
    }
}

async fn begin(
    pool: &LedgerPool,
    requested_by: &str,
    args: &Map<String, Value>,
    expect: &Map<String, Value>,
    place: &Place<'_>,
) {
    let intent = Intent {
        op_key: text(args, "op_key").unwrap_or_default(),
        action: text(args, "action").unwrap_or_default(),
        target: text(args, "target").unwrap_or_default(),
        params: args
            .get("params")
            .cloned()
            .unwrap_or(Value::Object(Map::new())),
        requested_by: text(args, "requested_by").unwrap_or_else(|| requested_by.to_string()),
        amount_minor: args.get("amount_minor").and_then(Value::as_i64),
        currency: text(args, "currency"),
        ..Intent::default()
    };
    let begun = begin_effect(pool, &intent)
        .await
        .unwrap_or_else(|e| place.fail(format!("begin_effect failed: {e}")));
    if let Some(decision) = expect.get("decision") {
        let got = serde_json::to_value(begun.decision).unwrap();
        place.same("decision", decision, &got);
    }
    if let Some(state) = expect.get("state").and_then(Value::as_str) {
        place.same("state", state_named(state, place), begun.state);
    }
    if let Some(result) = expect.get("result") {
        place.same("result", Some(result), begun.result.as_ref());
    }
    if let Some(bounds) = expect.get("retry_after_seconds") {
        let seconds = begun
            .result
            .as_ref()
            .and_then(|r| r.get("retry_after_seconds"))
            .and_then(Value::as_i64)
            .unwrap_or_else(|| place.fail(format!("no retry_after_seconds in {:?}", begun.result)));
        let at_least = bounds["at_least"].as_i64().unwrap();
        let at_most = bounds["at_most"].as_i64().unwrap();
        if seconds < at_least || seconds > at_most {
            place.fail(format!(
                "retry_after_seconds {seconds} not in {at_least}..={at_most}"
            ));
        }
    }
}

async fn dispatch(
    pool: &LedgerPool,
    worker: &str,
    args: &Map<String, Value>,
    expect: &Map<String, Value>,
    place: &Place<'_>,
) {
    let op_key = text(args, "op_key").unwrap_or_default();
    let target = text(args, "target").unwrap_or_default();
    let dispatch = mark_dispatched_on_target(pool, &op_key, &target, None, worker)
        .await
        .unwrap_or_else(|e| place.fail(format!("mark_dispatched failed: {e}")));
    if let Some(claimed) = expect.get("claimed").and_then(Value::as_bool) {
        place.same("claimed", claimed, dispatch.claimed);
    }
    if let Some(state) = expect.get("state").and_then(Value::as_str) {
        place.same("state", state_named(state, place), dispatch.state);
    }
}

async fn complete(
    pool: &LedgerPool,
    worker: &str,
    args: &Map<String, Value>,
    expect: &Map<String, Value>,
    place: &Place<'_>,
) {
    let op_key = text(args, "op_key").unwrap_or_default();
    let outcome = match text(args, "outcome").as_deref() {
        Some("succeeded") => Outcome::Succeeded,
        Some("unknown") => Outcome::Unknown,
        Some("failed") => Outcome::Failed {
            retryable: args
                .get("retryable")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
        other => place.fail(format!("no outcome named {other:?}")),
    };
    let completion = Completion {
        external_ref: text(args, "external_ref"),
        result: args.get("result").cloned(),
        reason: text(args, "reason"),
        worker: Some(worker.to_string()),
        error_class: text(args, "error_class").map(|name| error_class_named(&name, place)),
        retry_after: args
            .get("retry_after_seconds")
            .and_then(Value::as_f64)
            .map(Duration::from_secs_f64),
        target: text(args, "target"),
        ..Completion::default()
    };
    let completed = complete_effect(pool, &op_key, outcome, &completion).await;
    if let Some(sqlstate) = expect.get("error_sqlstate").and_then(Value::as_str) {
        match completed {
            Err(error) if error_has_sqlstate(&error, sqlstate, place) => return,
            other => place.fail(format!(
                "expected an error with SQLSTATE {sqlstate}, got {other:?}"
            )),
        }
    }
    let completed =
        completed.unwrap_or_else(|e| place.fail(format!("complete_effect failed: {e}")));
    if let Some(applied) = expect.get("applied").and_then(Value::as_bool) {
        place.same("applied", applied, completed.applied);
    }
    if let Some(state) = expect.get("state").and_then(Value::as_str) {
        place.same("state", state_named(state, place), completed.state);
    }
    if let Some(late) = expect.get("late").and_then(Value::as_bool) {
        place.same("late", late, completed.late);
    }
}

async fn set_policy(
    pool: &LedgerPool,
    operator: &str,
    args: &Map<String, Value>,
    place: &Place<'_>,
) {
    sqlx::query(
        "select * from ledger.op_set_policy(action => $1, operator => $2, reason => 'scenario',
            retry_semantics => $3, exclusive_per_target => $4,
            pending_window => make_interval(secs => $5))",
    )
    .bind(text(args, "action"))
    .bind(operator)
    .bind(text(args, "retry_semantics"))
    .bind(args.get("exclusive_per_target").and_then(Value::as_bool))
    .bind(args.get("pending_window_secs").and_then(Value::as_f64))
    .execute(pool)
    .await
    .unwrap_or_else(|e| place.fail(format!("op_set_policy failed: {e}")));
}

async fn resolve(
    pool: &LedgerPool,
    operator: &str,
    args: &Map<String, Value>,
    expect: &Map<String, Value>,
    place: &Place<'_>,
) {
    let row = sqlx::query(
        "select r.state from ledger.op_resolve(
            op_key => $1,
            expected_version => (select e.version from ledger.effects e where e.op_key = $1),
            operator => $2, reason => $3, outcome => $4, external_ref => $5) r",
    )
    .bind(text(args, "op_key"))
    .bind(operator)
    .bind(text(args, "reason"))
    .bind(text(args, "outcome"))
    .bind(text(args, "external_ref"))
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| place.fail(format!("op_resolve failed: {e}")));
    if let Some(state) = expect.get("state").and_then(Value::as_str) {
        place.same("state", state, row.get::<String, _>("state").as_str());
    }
}

async fn prune(
    pool: &LedgerPool,
    operator: &str,
    args: &Map<String, Value>,
    expect: &Map<String, Value>,
    place: &Place<'_>,
) {
    let keys: Vec<String> = serde_json::from_value(args["op_keys"].clone())
        .unwrap_or_else(|e| place.fail(format!("op_keys: {e}")));
    let row = sqlx::query(
        "select p.effects from ledger.prune_settled(
            older_than => interval '0', operator => $1, reason => 'scenario',
            only_ids => (select array_agg(e.id) from ledger.effects e where e.op_key = any($2))) p",
    )
    .bind(operator)
    .bind(&keys)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| place.fail(format!("prune_settled failed: {e}")));
    if let Some(effects) = expect.get("effects").and_then(Value::as_i64) {
        place.same("effects pruned", effects, row.get::<i64, _>("effects"));
    }
}

async fn check(
    pool: &LedgerPool,
    args: &Map<String, Value>,
    expect: &Map<String, Value>,
    place: &Place<'_>,
) {
    let op_key = text(args, "op_key").unwrap_or_default();
    let effect = sqlx::query(
        "select e.state, e.external_ref, e.error_class, e.retryable, e.attention,
                e.late_result_at is not null as late_result, e.dispatched_at is not null as dispatched,
                exists (select 1 from ledger.unknown_outcomes u where u.op_key = e.op_key) as in_unknown_pane
           from ledger.effects e where e.op_key = $1",
    )
    .bind(&op_key)
    .fetch_optional(pool)
    .await
    .unwrap_or_else(|e| place.fail(format!("reading the effect failed: {e}")));
    if let Some(pruned) = expect.get("pruned").and_then(Value::as_bool) {
        let tombstone: bool = sqlx::query_scalar(
            "select exists (select 1 from ledger.key_tombstones t where t.op_key = $1)",
        )
        .bind(&op_key)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| place.fail(format!("reading the tombstone failed: {e}")));
        place.same(
            "pruned (no effect row, a tombstone)",
            pruned,
            effect.is_none() && tombstone,
        );
    }
    for (field, expected) in expect {
        let got = match field.as_str() {
            "pruned" | "attempts" => continue,
            "state" | "external_ref" | "error_class" | "attention" => {
                let row = effect
                    .as_ref()
                    .unwrap_or_else(|| place.fail(format!("no effect {op_key}")));
                row.get::<Option<String>, _>(field.as_str())
                    .map_or(Value::Null, Value::String)
            }
            "retryable" | "late_result" | "dispatched" | "in_unknown_pane" => {
                let row = effect
                    .as_ref()
                    .unwrap_or_else(|| place.fail(format!("no effect {op_key}")));
                row.get::<Option<bool>, _>(field.as_str())
                    .map_or(Value::Null, Value::Bool)
            }
            other => place.fail(format!("check knows no field {other}")),
        };
        place.same(field, expected, &got);
    }
    if let Some(Value::Object(kinds)) = expect.get("attempts") {
        for (kind, count) in kinds {
            let got: i64 = sqlx::query_scalar(
                "select count(*) from ledger.attempts a where a.op_key = $1 and a.kind = $2",
            )
            .bind(&op_key)
            .bind(kind)
            .fetch_one(pool)
            .await
            .unwrap_or_else(|e| place.fail(format!("counting attempts failed: {e}")));
            place.same(
                &format!("attempts of kind {kind}"),
                count.as_i64(),
                Some(got),
            );
        }
    }
}

#[tokio::test]
async fn the_rust_writer_passes_every_scenario() {
    let db = common::test_db().await;
    let file: Value = serde_json::from_str(SCENARIOS).expect("clients/scenarios.json is JSON");
    let requested_by = file["requested_by"].as_str().expect("requested_by");
    let operator = file["operator"].as_str().expect("operator");
    let scenarios = file["scenarios"].as_array().expect("scenarios");
    assert!(!scenarios.is_empty(), "the scenario file lists no scenario");
    let mut steps_run = 0;
    for scenario in scenarios {
        let name = scenario["name"]
            .as_str()
            .expect("every scenario has a name");
        for (index, step) in scenario["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .enumerate()
        {
            let place = Place {
                scenario: name,
                step: index,
            };
            let step = step
                .as_object()
                .unwrap_or_else(|| place.fail("a step is an object"));
            let empty = Map::new();
            let expect = step
                .get("expect")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            let (verb, args) = step
                .iter()
                .find(|(key, _)| !matches!(key.as_str(), "expect" | "about"))
                .unwrap_or_else(|| place.fail("a step names a verb"));
            let args = args
                .as_object()
                .unwrap_or_else(|| place.fail("a verb's arguments are an object"));
            match verb.as_str() {
                "begin" => begin(&db.pool, requested_by, args, expect, &place).await,
                "dispatch" => dispatch(&db.pool, requested_by, args, expect, &place).await,
                "complete" => complete(&db.pool, requested_by, args, expect, &place).await,
                "set_policy" => set_policy(&db.pool, operator, args, &place).await,
                "resolve" => resolve(&db.pool, operator, args, expect, &place).await,
                "prune" => prune(&db.pool, operator, args, expect, &place).await,
                "check" => check(&db.pool, args, expect, &place).await,
                "crash" => {}
                "sleep" => {
                    let seconds = args["seconds"]
                        .as_f64()
                        .unwrap_or_else(|| place.fail("sleep needs seconds"));
                    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                }
                other => place.fail(format!("no verb named {other}")),
            }
            steps_run += 1;
        }
    }
    assert!(steps_run >= scenarios.len(), "ran only {steps_run} steps");
}

/// What one writer made of one call of a key case: its key and canonical
/// params, or the error that refused it.
type Made = Result<(String, Value), String>;

/// Checks one case's calls as SCENARIOS.md says ("Keys").
fn check_key_case(writer: &str, case: &Value, made: &[Made]) {
    let name = case["name"].as_str().expect("every key case has a name");
    let fail = |index: usize, what: String| -> ! {
        panic!("{writer}: key case {name:?}, call {index}: {what}")
    };
    let expect = &case["expect"];
    if let Some(key) = expect.get("key").and_then(Value::as_str) {
        for (index, made) in made.iter().enumerate() {
            match made {
                Ok((got, params)) => {
                    if got != key {
                        fail(index, format!("key {got:?}, expected {key:?}"));
                    }
                    if let Some(expected) = expect.get("params")
                        && params != expected
                    {
                        fail(index, format!("params {params}, expected {expected}"));
                    }
                }
                Err(error) => fail(index, format!("refused: {error}")),
            }
        }
    }
    if expect.get("distinct") == Some(&Value::Bool(true)) {
        let mut seen = std::collections::BTreeMap::new();
        for (index, made) in made.iter().enumerate() {
            match made {
                Ok((key, _)) => {
                    if let Some(first) = seen.insert(key.clone(), index) {
                        fail(index, format!("key {key:?} is also call {first}'s"));
                    }
                }
                Err(error) => fail(index, format!("refused: {error}")),
            }
        }
    }
    if let Some(argument) = expect.get("refused").and_then(Value::as_str) {
        for (index, made) in made.iter().enumerate() {
            match made {
                Ok((key, _)) => fail(index, format!("made key {key:?}, expected a refusal")),
                Err(error) if !error.contains(argument) => {
                    fail(index, format!("refused without naming {argument}: {error}"))
                }
                Err(_) => {}
            }
        }
    }
}

fn key_cases() -> Vec<Value> {
    let file: Value = serde_json::from_str(SCENARIOS).expect("clients/scenarios.json is JSON");
    let cases = file["keys"]["cases"]
        .as_array()
        .expect("keys.cases")
        .clone();
    assert!(cases.len() >= 10, "the key cases are missing");
    cases
}

fn calls_of(case: &Value) -> Vec<Map<String, Value>> {
    case["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|call| call.as_object().expect("a call is an object").clone())
        .collect()
}

#[test]
fn the_gateway_makes_every_key_of_the_shared_cases() {
    for case in key_cases() {
        let calls = calls_of(&case);
        let every_argument: std::collections::BTreeSet<&String> =
            calls.iter().flat_map(|call| call.keys()).collect();
        let rule: effectwatch::gateway::policy::ToolRule = serde_json::from_value(serde_json::json!({
            "action": "case",
            "op_key": case["template"],
            "target": case["template"],
            "params": every_argument,
            "amount_minor": case.get("money"),
            "normalise": case.get("normalise").cloned().unwrap_or_else(|| serde_json::json!({})),
        }))
        .expect("a key case is a tool rule");
        let made: Vec<Made> = calls
            .iter()
            .map(|call| rule.map(call).map(|mapped| (mapped.op_key, mapped.params)))
            .collect();
        check_key_case("the gateway", &case, &made);
    }
}

#[tokio::test]
async fn the_ledger_makes_every_key_of_the_shared_cases() {
    let db = common::test_db().await;
    for case in key_cases() {
        let mut made = Vec::new();
        for call in calls_of(&case) {
            let answer = sqlx::query(
                "select ledger.key_from_template($1, $2, $3, $4) as key,
                        ledger.canonical_arguments($2, $3, $4) as params",
            )
            .bind(case["template"].as_str())
            .bind(Value::Object(call))
            .bind(case.get("normalise"))
            .bind(case.get("money").and_then(Value::as_str))
            .fetch_one(&db.pool)
            .await;
            made.push(match answer {
                Ok(row) => Ok((row.get("key"), row.get("params"))),
                Err(error) => Err(error.to_string()),
            });
        }
        check_key_case("the ledger", &case, &made);
    }
}

/// The ledger stores params by value: one SQL caller writing the same
/// params two ways is one intent (a replay, not a mismatch).
#[tokio::test]
async fn params_written_two_ways_are_one_intent() {
    let db = common::test_db().await;
    let intent = |params: Value| Intent {
        op_key: "refund:INV-77x1:1500".into(),
        action: "refund".into(),
        target: "invoice:INV-77x1".into(),
        params,
        requested_by: "agent-keys".into(),
        amount_minor: Some(1500),
        currency: Some("EUR".into()),
        ..Default::default()
    };
    let first = begin_effect(
        &db.pool,
        &intent(serde_json::json!({"amount_minor": 1500.0, "lines": [{"qty": 2.0}]})),
    )
    .await
    .unwrap();
    assert_eq!(first.decision, Decision::Proceed);
    let stored: Value = sqlx::query_scalar(
        "select params from ledger.effects where op_key = 'refund:INV-77x1:1500'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        stored,
        serde_json::json!({"amount_minor": 1500, "lines": [{"qty": 2}]})
    );
    let again = begin_effect(
        &db.pool,
        &intent(serde_json::json!({"lines": [{"qty": 2}], "amount_minor": 1500})),
    )
    .await
    .unwrap();
    assert_eq!(
        again.decision,
        Decision::InFlight,
        "the same params, not a mismatch"
    );
}
