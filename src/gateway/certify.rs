//! `effectwatch gateway certify`: the seeds' release checklist, run against
//! a staging tool server and a staging ledger. Standing where the gateway
//! stands, certification makes the failures itself — the call twice, at
//! once, its reply dropped, the caller dead after dispatch, a retry that
//! reaches the tool server again, a changed parameter under the old key, a
//! late answer — and judges each by the tool server's own state, read
//! through the read-only lookup tool the policy names, not by the ledger
//! alone.
//!
//! A run is never mistaken for production traffic: its effects are recorded
//! as `certify:<alias>`, not as the gateway's `gateway:<alias>`, and every
//! key carries the run's marker (`certify-<run>-<case>` appended to the
//! string arguments that name the action — never to its amount or currency,
//! which the ledger checks and the tool acts on as they are). At its end
//! [`Certification::settle`] closes what the run left open (a dropped reply
//! is unknown, a dead caller's call pending) through the operator
//! functions, each with its audit entry, so nothing of it waits in the
//! overdue, unknown, held or duplicates panes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient};
use serde::Serialize;
use serde_json::{Map, Value};

use super::policy::{MappedCall, Policy, ToolRule};
use super::proxy::{Gateway, OP_KEY_META};
use crate::ledger::actions::{self, Resolution, SeenVersion};
use crate::ledger::certification;
use crate::ledger::writer::{self, Completion, ErrorClass, Outcome};
use crate::ledger::{LedgerError, LedgerPool};

/// How long a repeat waits for a call abandoned on purpose.
const ABANDONED_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Held,
    NotHeld,
    NotChecked,
}

#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub check: &'static str,
    pub verdict: Verdict,
    pub saw: String,
}

impl Line {
    fn judged(check: &'static str, held: bool, saw: String) -> Line {
        Line {
            check,
            verdict: if held {
                Verdict::Held
            } else {
                Verdict::NotHeld
            },
            saw,
        }
    }
}

pub const DUPLICATES: &str = "duplicates return the prior result";
pub const CONCURRENT: &str = "deliveries at once act once";
pub const AMBIGUOUS: &str = "ambiguous effects enter reconciliation, never a blind retry";
pub const CRASH: &str = "a crash after dispatch is never repeated";
pub const IDENTITY: &str = "retries reuse the stable identity";
pub const CHANGED: &str = "a changed parameter under the old key is refused, not merged";
pub const LATE: &str = "late messages cannot reopen work";
pub const DISTINCT: &str = "distinct actions stay distinct";
pub const PRUNED: &str = "a replay long after (past a prune) is still answered";

/// The cases that make a business action of their own, by their tag.
const CASES: [&str; 9] = [
    "dup", "once", "lost", "crash", "identity", "changed", "late", "one", "two",
];

/// Who a certification run's effects are requested by, and who its
/// settlements are made by in the audit trail: never the gateway's own
/// `gateway:<alias>`, so no one takes them for production traffic.
pub fn requested_by(policy: &Policy) -> String {
    format!("certify:{}", policy.alias)
}

pub use crate::ledger::certification::may_settle;

/// What the end of a run did to the effects it made.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Settlement {
    /// The keys of every effect the run made, oldest first.
    pub made: Vec<String>,
    /// The effects it left open (pending, unknown, held), now settled.
    pub settled: Vec<Settled>,
    /// The effects whose repeated calls (the checklist's, on purpose) were
    /// acknowledged, off the duplicates pane.
    pub acknowledged: Vec<String>,
    /// What could not be settled, and why: an operator settles it.
    pub left_open: Vec<LeftOpen>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Settled {
    pub op_key: String,
    pub was: String,
    pub now: String,
    /// The operator call: `resolve` or `cancel`.
    pub how: &'static str,
    /// The tool's own reference, when it answered with one.
    pub external_ref: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeftOpen {
    pub op_key: String,
    /// Its state as last read (`repeated calls`: it is settled, its
    /// repeats are not acknowledged).
    pub state: String,
    /// The operator verb that settles it: `cancel`, `resolve` or
    /// `acknowledge-duplicates`; `list` when the run's effects could not be
    /// read (`op_key` is then the run's marker, to find them by).
    pub settle_with: &'static str,
    /// For `resolve`: the tool's reference, when it answered with one (it
    /// is then resolved as succeeded with it).
    pub external_ref: Option<String>,
    pub problem: String,
}

/// One effect of the run, as a login reads it.
type Open = certification::RunEffect;

pub struct Certification {
    gateway: Gateway,
    tool: String,
    rule: ToolRule,
    arguments: Map<String, Value>,
    run: String,
    lookup: Option<(String, String)>,
    requested_by: String,
    /// The tool's answers to the calls certification made around the
    /// ledger for an effect it then left open, by key: its reference is
    /// the evidence the effect is resolved with.
    answers: Mutex<HashMap<String, CallToolResult>>,
}

impl Certification {
    /// Checks that the tool can be certified: it has a rule, and the rule
    /// names a lookup tool and its count field.
    pub fn new(
        gateway: Gateway,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<Self, String> {
        let rule = gateway
            .policy()
            .tools
            .get(tool)
            .filter(|rule| !rule.read_only)
            .cloned()
            .ok_or_else(|| format!("the policy maps no side-effecting tool {tool:?}"))?;
        rule.map(&arguments)
            .map_err(|problem| format!("--args for {tool}: {problem}"))?;
        let lookup = rule.lookup.clone().zip(rule.lookup_count.clone());
        let run = format!("{:08x}", rand::random::<u32>());
        let requested_by = requested_by(gateway.policy());
        let gateway = gateway
            .with_in_flight_wait(ABANDONED_WAIT)
            .with_requested_by(&requested_by);
        if gateway.requested_by() != requested_by {
            return Err(
                "certification needs a gateway of its own: this one is shared, and its calls would be recorded as the gateway's".into(),
            );
        }
        let certification = Certification {
            gateway,
            tool: tool.to_string(),
            rule,
            arguments,
            run,
            lookup,
            requested_by,
            answers: Mutex::default(),
        };
        // Each case is an action of its own, under a key marked with the run.
        let keys = certification.keys();
        let marker = certification.marker().to_lowercase();
        let distinct: BTreeSet<&String> = keys.iter().collect();
        if distinct.len() != keys.len()
            || keys.iter().any(|key| !key.to_lowercase().contains(&marker))
        {
            return Err(format!(
                "certify cannot make each case a call of its own: the key of {tool} ({}) has no string argument of --args to mark with the run besides its amount and currency, which are never marked (the ledger checks them); put an argument that names the action, such as an order id, in op_key",
                certification.rule.op_key.as_deref().unwrap_or_default()
            ));
        }
        Ok(certification)
    }

    /// The run's id: its keys carry [`Certification::marker`].
    pub fn run_id(&self) -> &str {
        &self.run
    }

    /// What every key of the run carries: `certify-<run>`.
    pub fn marker(&self) -> String {
        format!("certify-{}", self.run)
    }

    /// Who the run's effects are requested by (`certify:<alias>`).
    pub fn requested_by(&self) -> &str {
        &self.requested_by
    }

    /// The reason written in the audit trail for each effect the run settles.
    pub fn reason(&self) -> String {
        format!("certification run {}: staging effect", self.run)
    }

    /// The gateway the run calls through (to close it at the end).
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// The key of each case, whether or not it reached the ledger.
    fn keys(&self) -> Vec<String> {
        CASES
            .iter()
            .map(|case| self.mapped(&self.arguments_for(case)).op_key)
            .collect()
    }

    /// Every line of the checklist, in order.
    pub async fn run(&self) -> Vec<Line> {
        vec![
            self.duplicates().await,
            self.concurrent().await,
            self.ambiguous().await,
            self.crash().await,
            self.identity().await,
            self.changed().await,
            self.late().await,
            self.distinct().await,
            Line {
                check: PRUNED,
                verdict: Verdict::NotChecked,
                saw: "needs the ledger's owner: prune the staging ledger (effectwatch prune) and call the key again".into(),
            },
        ]
    }

    /// The call's arguments made a business action of this case's own:
    /// every string argument of [`Certification::tagged_arguments`] gets
    /// the case's tag; numbers never do.
    fn arguments_for(&self, case: &str) -> Map<String, Value> {
        let mut arguments = self.arguments.clone();
        for name in self.tagged_arguments() {
            if let Some(Value::String(text)) = arguments.get_mut(&name) {
                text.push_str(&format!("-{}-{case}", self.marker()));
            }
        }
        arguments
    }

    /// The arguments that name the action: those the key and the target
    /// are made of, but not its amount or currency — an `EUR-certify-…`
    /// is no currency, and the ledger refuses the call.
    fn tagged_arguments(&self) -> BTreeSet<String> {
        let mut names = self.rule.key_arguments();
        for money in [&self.rule.amount_minor, &self.rule.currency]
            .into_iter()
            .flatten()
        {
            names.remove(money);
        }
        names
    }

    fn request(&self, arguments: &Map<String, Value>) -> CallToolRequestParams {
        CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments.clone())
    }

    fn mapped(&self, arguments: &Map<String, Value>) -> MappedCall {
        // Checked in `new` for the given arguments; a case's differ only in tags.
        self.rule.map(arguments).unwrap_or_default()
    }

    async fn through_gateway(&self, arguments: &Map<String, Value>, tag: &str) -> CallToolResult {
        let peer = self.gateway.upstream_peer().await;
        let request_id = format!("certify:{}:{tag}", self.run);
        match self
            .gateway
            .record(
                self.request(arguments),
                "effectwatch-certify",
                request_id,
                peer,
            )
            .await
        {
            Ok(result) => result,
            Err(error) => CallToolResult::error(vec![rmcp::model::ContentBlock::text(
                error.message.to_string(),
            )]),
        }
    }

    /// The tool called directly, around the ledger, carrying `op_key` in
    /// `_meta` as the gateway does.
    async fn straight_to_the_tool(
        &self,
        peer: &Peer<RoleClient>,
        arguments: &Map<String, Value>,
        op_key: &str,
    ) -> Result<CallToolResult, String> {
        let mut request = self.request(arguments);
        request
            .meta
            .get_or_insert_with(Default::default)
            .0
            .0
            .insert(OP_KEY_META.to_string(), Value::String(op_key.to_string()));
        peer.call_tool(request)
            .await
            .map_err(|error| error.to_string())
    }

    /// How many effects the tool server holds for these arguments.
    async fn provider_count(&self, arguments: &Map<String, Value>) -> Held {
        Held(self.ask_lookup(arguments).await)
    }

    async fn ask_lookup(&self, arguments: &Map<String, Value>) -> Option<u64> {
        let (tool, field) = self.lookup.as_ref()?;
        let peer = self.gateway.upstream_peer().await.ok()?;
        let tools = peer.list_all_tools().await.ok()?;
        let schema = tools.iter().find(|listed| listed.name == tool.as_str())?;
        let wanted: Vec<&String> = schema
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|properties| properties.keys().collect())
            .unwrap_or_default();
        let lookup_arguments: Map<String, Value> = arguments
            .iter()
            .filter(|(name, _)| wanted.contains(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        let answer = peer
            .call_tool(CallToolRequestParams::new(tool.clone()).with_arguments(lookup_arguments))
            .await
            .ok()?;
        answer.structured_content?.get(field)?.as_u64()
    }

    async fn state_of(&self, op_key: &str) -> String {
        writer::state_of(self.gateway.pool(), op_key)
            .await
            .ok()
            .flatten()
            .map_or_else(|| "absent".into(), |state| state.as_str().to_string())
    }

    fn no_lookup(&self, check: &'static str) -> Option<Line> {
        self.lookup.is_none().then(|| Line {
            check,
            verdict: Verdict::NotChecked,
            saw: format!(
                "the policy names no lookup for {}: add lookup = \"TOOL\" and lookup_count = \"FIELD\"",
                self.tool
            ),
        })
    }

    async fn duplicates(&self) -> Line {
        if let Some(line) = self.no_lookup(DUPLICATES) {
            return line;
        }
        let arguments = self.arguments_for("dup");
        let first = self.through_gateway(&arguments, "dup-1").await;
        let second = self.through_gateway(&arguments, "dup-2").await;
        let count = self.provider_count(&arguments).await;
        let same = first.is_error != Some(true) && first == second;
        Line::judged(
            DUPLICATES,
            same && count.is(1),
            format!(
                "second answer the same: {same}; provider holds {count}; {}",
                summary(&second)
            ),
        )
    }

    async fn concurrent(&self) -> Line {
        if let Some(line) = self.no_lookup(CONCURRENT) {
            return line;
        }
        let arguments = self.arguments_for("once");
        let calls = (0..4).map(|n| {
            let arguments = arguments.clone();
            async move { self.through_gateway(&arguments, &format!("once-{n}")).await }
        });
        let answers = futures_util::future::join_all(calls).await;
        let count = self.provider_count(&arguments).await;
        let agreed = answers.windows(2).all(|pair| pair[0] == pair[1]);
        Line::judged(
            CONCURRENT,
            count.is(1) && agreed,
            format!("4 at once; provider holds {count}; every answer the same: {agreed}"),
        )
    }

    /// Begins and claims the effect as the gateway would, for a case that
    /// then breaks the call on purpose.
    async fn claimed(&self, call: &MappedCall, tag: &str) -> Result<(), String> {
        let requested_by = &self.requested_by;
        let intent = call.intent(requested_by, format!("certify:{}:{tag}", self.run));
        let begun = writer::begin_effect(self.gateway.pool(), &intent)
            .await
            .map_err(|error| error.to_string())?;
        if !begun.decision.may_dispatch() {
            return Err(format!("the ledger answered {:?}", begun.decision));
        }
        let dispatch = writer::mark_dispatched_on_target(
            self.gateway.pool(),
            &call.op_key,
            &call.target,
            None,
            requested_by,
        )
        .await
        .map_err(|error| error.to_string())?;
        if !dispatch.claimed {
            return Err("the ledger did not let certification claim it".into());
        }
        Ok(())
    }

    async fn complete(
        &self,
        call: &MappedCall,
        outcome: Outcome,
        completion: Completion,
    ) -> Result<writer::Completed, String> {
        writer::complete_effect(
            self.gateway.pool(),
            &call.op_key,
            outcome,
            &Completion {
                target: Some(call.target.clone()),
                worker: Some(self.requested_by.clone()),
                ..completion
            },
        )
        .await
        .map_err(|error| error.to_string())
    }

    async fn ambiguous(&self) -> Line {
        if let Some(line) = self.no_lookup(AMBIGUOUS) {
            return line;
        }
        let arguments = self.arguments_for("lost");
        let call = self.mapped(&arguments);
        let broke = async {
            self.claimed(&call, "lost").await?;
            let peer = self
                .gateway
                .upstream_peer()
                .await
                .map_err(|e| e.message.to_string())?;
            // The tool acts; its answer is dropped on the way back (kept
            // aside as the evidence the effect is settled with at the end).
            if let Ok(dropped) = self
                .straight_to_the_tool(&peer, &arguments, &call.op_key)
                .await
            {
                self.keep_answer(&call.op_key, dropped);
            }
            self.complete(
                &call,
                Outcome::Unknown,
                Completion {
                    error_class: Some(ErrorClass::Timeout),
                    reason: Some("certification: the reply was dropped on purpose".into()),
                    ..Completion::default()
                },
            )
            .await
        }
        .await;
        if let Err(problem) = broke {
            return Line::judged(
                AMBIGUOUS,
                false,
                format!("could not set the case up: {problem}"),
            );
        }
        let state = self.state_of(&call.op_key).await;
        let repeat = self.through_gateway(&arguments, "lost-repeat").await;
        let count = self.provider_count(&arguments).await;
        let refused =
            repeat.is_error == Some(true) && summary(&repeat).contains("may already have happened");
        Line::judged(
            AMBIGUOUS,
            state == "unknown" && refused && count.is(1),
            format!("ledger {state}; the repeat refused: {refused}; provider holds {count}"),
        )
    }

    async fn crash(&self) -> Line {
        if let Some(line) = self.no_lookup(CRASH) {
            return line;
        }
        let arguments = self.arguments_for("crash");
        let call = self.mapped(&arguments);
        let broke = async {
            self.claimed(&call, "crash").await?;
            let peer = self
                .gateway
                .upstream_peer()
                .await
                .map_err(|e| e.message.to_string())?;
            // The caller dies after the tool acted: nothing more is written.
            let answer = self
                .straight_to_the_tool(&peer, &arguments, &call.op_key)
                .await?;
            self.keep_answer(&call.op_key, answer);
            Ok::<_, String>(())
        }
        .await;
        if let Err(problem) = broke {
            return Line::judged(
                CRASH,
                false,
                format!("could not set the case up: {problem}"),
            );
        }
        let repeat = self.through_gateway(&arguments, "crash-repeat").await;
        let count = self.provider_count(&arguments).await;
        let refused = repeat.is_error == Some(true);
        Line::judged(
            CRASH,
            refused && count.is(1),
            format!(
                "the repeat refused: {refused}; provider holds {count}; {}",
                summary(&repeat)
            ),
        )
    }

    async fn identity(&self) -> Line {
        if let Some(line) = self.no_lookup(IDENTITY) {
            return line;
        }
        let arguments = self.arguments_for("identity");
        let call = self.mapped(&arguments);
        let peer = match self.gateway.upstream_peer().await {
            Ok(peer) => peer,
            Err(error) => return Line::judged(IDENTITY, false, error.message.to_string()),
        };
        // What a reconciler's safe retry or a redelivered message does: the
        // same call, under the same key, reaches the tool server twice.
        let first = self
            .straight_to_the_tool(&peer, &arguments, &call.op_key)
            .await;
        let second = self
            .straight_to_the_tool(&peer, &arguments, &call.op_key)
            .await;
        let count = self.provider_count(&arguments).await;
        Line::judged(
            IDENTITY,
            first.is_ok() && second.is_ok() && count.is(1),
            format!(
                "the same key sent twice past the ledger; provider holds {count} (a tool server that passes {OP_KEY_META} to its provider as the idempotency key holds one)"
            ),
        )
    }

    async fn changed(&self) -> Line {
        let key_arguments = self.rule.key_arguments();
        let Some(name) = self
            .rule
            .params
            .iter()
            .find(|name| !key_arguments.contains(*name) && self.arguments.contains_key(*name))
        else {
            return Line {
                check: CHANGED,
                verdict: Verdict::NotChecked,
                saw: "every param of the rule is part of its key: a changed one is a new key"
                    .into(),
            };
        };
        if let Some(line) = self.no_lookup(CHANGED) {
            return line;
        }
        let arguments = self.arguments_for("changed");
        let first = self.through_gateway(&arguments, "changed-1").await;
        let mut changed = arguments.clone();
        if let Some(value) = changed.get_mut(name) {
            let other = match &*value {
                Value::String(text) => Value::String(format!("{text}-changed")),
                Value::Number(number) => Value::from(number.as_i64().unwrap_or(0) + 1),
                Value::Bool(flag) => Value::Bool(!flag),
                unchanged => Value::String(format!("{unchanged}-changed")),
            };
            *value = other;
        }
        let second = self.through_gateway(&changed, "changed-2").await;
        let count = self.provider_count(&arguments).await;
        let refused = second.is_error == Some(true) && summary(&second).contains("already used");
        Line::judged(
            CHANGED,
            first.is_error != Some(true) && refused && count.is(1),
            format!("{name} changed; refused: {refused}; provider holds {count}"),
        )
    }

    async fn late(&self) -> Line {
        if let Some(line) = self.no_lookup(LATE) {
            return line;
        }
        let arguments = self.arguments_for("late");
        let call = self.mapped(&arguments);
        let setup = async {
            self.claimed(&call, "late").await?;
            let peer = self
                .gateway
                .upstream_peer()
                .await
                .map_err(|e| e.message.to_string())?;
            let answer = self
                .straight_to_the_tool(&peer, &arguments, &call.op_key)
                .await?;
            // The caller gave up first …
            self.complete(
                &call,
                Outcome::Unknown,
                Completion {
                    error_class: Some(ErrorClass::Timeout),
                    reason: Some("certification: no answer in time".into()),
                    ..Completion::default()
                },
            )
            .await?;
            // … then the answer came, and after it a contrary message.
            let late = self
                .complete(
                    &call,
                    Outcome::Succeeded,
                    Completion {
                        result: serde_json::to_value(&answer).ok(),
                        reason: Some("certification: the late answer".into()),
                        ..Completion::default()
                    },
                )
                .await?;
            let contrary = self
                .complete(
                    &call,
                    Outcome::Failed { retryable: true },
                    Completion {
                        reason: Some("certification: a contrary message after it".into()),
                        ..Completion::default()
                    },
                )
                .await?;
            Ok::<_, String>((answer, late, contrary))
        }
        .await;
        let (answer, late, contrary) = match setup {
            Ok(found) => found,
            Err(problem) => {
                return Line::judged(LATE, false, format!("could not set the case up: {problem}"));
            }
        };
        let state = self.state_of(&call.op_key).await;
        let replay = self.through_gateway(&arguments, "late-replay").await;
        let count = self.provider_count(&arguments).await;
        Line::judged(
            LATE,
            late.applied
                && !contrary.applied
                && state == "succeeded"
                && replay == answer
                && count.is(1),
            format!(
                "late answer applied: {}; contrary message applied: {}; ledger {state}; the next call replays it: {}; provider holds {count}",
                late.applied,
                contrary.applied,
                replay == answer
            ),
        )
    }

    async fn distinct(&self) -> Line {
        if let Some(line) = self.no_lookup(DISTINCT) {
            return line;
        }
        let (one, two) = (self.arguments_for("one"), self.arguments_for("two"));
        let first = self.through_gateway(&one, "one").await;
        let second = self.through_gateway(&two, "two").await;
        let counts = (
            self.provider_count(&one).await,
            self.provider_count(&two).await,
        );
        Line::judged(
            DISTINCT,
            first.is_error != Some(true)
                && second.is_error != Some(true)
                && counts.0.is(1)
                && counts.1.is(1),
            format!("provider holds {} and {}", counts.0, counts.1),
        )
    }
}

impl Certification {
    fn keep_answer(&self, op_key: &str, answer: CallToolResult) {
        if let Ok(mut answers) = self.answers.lock() {
            answers.insert(op_key.to_string(), answer);
        }
    }

    /// The tool's reference for the effect under `op_key`, from an answer
    /// certification saw it give (by the rule's `external_ref`).
    fn reference_for(&self, op_key: &str) -> Option<String> {
        let field = self.rule.external_ref.as_deref()?;
        let answers = self.answers.lock().ok()?;
        let answer = answers.get(op_key)?;
        if answer.is_error == Some(true) {
            return None;
        }
        match answer.structured_content.as_ref()?.get(field)? {
            Value::String(text) if !text.trim().is_empty() => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            _ => None,
        }
    }

    /// The effects the run made, oldest first, as `pool`'s login reads them.
    async fn made_in(&self, pool: &LedgerPool) -> Result<Vec<Open>, LedgerError> {
        certification::effects_made(pool, &self.keys(), &self.requested_by).await
    }

    async fn read_open(
        &self,
        pool: &LedgerPool,
        op_key: &str,
    ) -> Result<Option<Open>, LedgerError> {
        certification::effect_made(pool, op_key, &self.requested_by).await
    }

    /// Closes, through the operator functions of `pool`'s login (each call
    /// with its audit entry, never a direct write), every effect the run
    /// left open: one never dispatched (pending or held) is cancelled; one
    /// dispatched (pending or unknown) is resolved, as succeeded with the
    /// tool's reference when certification saw the tool answer with one,
    /// else as failed and not retryable. The repeated calls the checklist
    /// made on purpose are acknowledged, off the duplicates pane. Every
    /// call gives [`Certification::reason`] and is made as
    /// [`Certification::requested_by`]. Effects stay in the ledger, settled,
    /// for anyone to look at; retention removes them with the rest.
    pub async fn settle(&self, pool: &LedgerPool) -> Settlement {
        let mut settlement = Settlement::default();
        // What the gateway's login made (an agent reads its own effects),
        // and what the settling login sees of it: another ledger sees none.
        let made = match self.made_in(self.gateway.pool()).await {
            Ok(made) => made,
            Err(error) => {
                settlement.left_open.push(LeftOpen {
                    op_key: self.marker(),
                    state: "?".into(),
                    settle_with: "list",
                    external_ref: None,
                    problem: format!("the run's effects could not be read: {error}"),
                });
                return settlement;
            }
        };
        let seen: Result<Vec<String>, String> = match self.made_in(pool).await {
            Ok(seen) => Ok(seen.into_iter().map(|effect| effect.op_key).collect()),
            Err(error) => Err(error.to_string()),
        };
        for effect in &made {
            let Some(verb) = settle_with(&effect.state, effect.dispatched) else {
                continue;
            };
            let unseen = match &seen {
                Ok(seen) if seen.contains(&effect.op_key) => None,
                Ok(_) => {
                    Some("the settling login does not see it: is it on the same ledger?".into())
                }
                Err(error) => Some(format!("the settling login could not read it: {error}")),
            };
            if let Some(problem) = unseen {
                settlement.left_open.push(LeftOpen {
                    op_key: effect.op_key.clone(),
                    state: effect.state.clone(),
                    settle_with: verb,
                    external_ref: self.reference_for(&effect.op_key),
                    problem,
                });
                continue;
            }
            match self.settle_one(pool, &effect.op_key).await {
                Ok(Some(settled)) => settlement.settled.push(settled),
                Ok(None) => {}
                Err((open, error)) => settlement.left_open.push(LeftOpen {
                    op_key: effect.op_key.clone(),
                    settle_with: open
                        .as_ref()
                        .and_then(|open| settle_with(&open.state, open.dispatched))
                        .unwrap_or(verb),
                    state: open.map_or_else(|| effect.state.clone(), |open| open.state),
                    external_ref: self.reference_for(&effect.op_key),
                    problem: error.to_string(),
                }),
            }
        }
        settlement.made = made.into_iter().map(|effect| effect.op_key).collect();
        if let Err(error) = self.acknowledge_repeats(pool, &mut settlement).await {
            settlement.left_open.push(LeftOpen {
                op_key: self.marker(),
                state: "repeated calls".into(),
                settle_with: "list",
                external_ref: None,
                problem: format!("the run's repeated calls could not be acknowledged: {error}"),
            });
        }
        settlement
    }

    /// Settles one effect if it is open; a change made meanwhile (the
    /// reconciler, a late answer) is read again and decided on again.
    async fn settle_one(
        &self,
        pool: &LedgerPool,
        op_key: &str,
    ) -> Result<Option<Settled>, (Option<Open>, LedgerError)> {
        let reason = self.reason();
        let mut tries = 0;
        loop {
            tries += 1;
            let open = self
                .read_open(pool, op_key)
                .await
                .map_err(|error| (None, error))?;
            let Some(open) = open else {
                return Ok(None);
            };
            let seen = SeenVersion(open.version);
            let reference = self.reference_for(op_key);
            let done = match settle_with(&open.state, open.dispatched) {
                Some("cancel") => actions::CANCEL
                    .call(pool, op_key, seen, &self.requested_by, &reason)
                    .await
                    .map(|outcome| (outcome, "cancel")),
                Some(_) => {
                    let resolution = match &reference {
                        Some(external_ref) => Resolution::Succeeded {
                            external_ref: external_ref.clone(),
                        },
                        None => Resolution::Failed { retryable: false },
                    };
                    actions::resolve(pool, op_key, seen, &self.requested_by, &reason, &resolution)
                        .await
                        .map(|outcome| (outcome, "resolve"))
                }
                _ => return Ok(None),
            };
            match done {
                Ok((outcome, how)) => {
                    return Ok(Some(Settled {
                        op_key: op_key.to_string(),
                        was: open.state.clone(),
                        now: outcome.state.as_str().to_string(),
                        how,
                        external_ref: reference
                            .filter(|_| how == "resolve")
                            .filter(|_| outcome.state.as_str() == "succeeded"),
                    }));
                }
                Err(LedgerError::Changed(_)) if tries < 3 => continue,
                Err(error) => return Err((Some(open), error)),
            }
        }
    }

    async fn acknowledge_repeats(
        &self,
        pool: &LedgerPool,
        settlement: &mut Settlement,
    ) -> Result<(), LedgerError> {
        let repeated =
            certification::repeats_to_acknowledge(pool, &settlement.made, &self.requested_by)
                .await?;
        let reason = self.reason();
        for (op_key, version) in repeated {
            match actions::ACKNOWLEDGE_DUPLICATES
                .call(
                    pool,
                    &op_key,
                    SeenVersion(version),
                    &self.requested_by,
                    &reason,
                )
                .await
            {
                Ok(_) => settlement.acknowledged.push(op_key),
                Err(error) => settlement.left_open.push(LeftOpen {
                    op_key,
                    state: "repeated calls".into(),
                    settle_with: "acknowledge-duplicates",
                    external_ref: None,
                    problem: error.to_string(),
                }),
            }
        }
        Ok(())
    }
}

/// The operator verb that settles an effect in `state`, dispatched or
/// not; `None` when it is not open.
fn settle_with(state: &str, dispatched: bool) -> Option<&'static str> {
    match (state, dispatched) {
        ("held", _) | ("pending", false) => Some("cancel"),
        ("pending", true) | ("unknown", _) => Some("resolve"),
        _ => None,
    }
}

/// How many effects the tool server holds, by its lookup tool; `None` when
/// there is no lookup or it cannot be read. Shown as a person reads it:
/// `1`, never `Some(1)`, and a missing count is never shown as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held(Option<u64>);

impl Held {
    fn is(self, count: u64) -> bool {
        self.0 == Some(count)
    }
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(count) => write!(f, "{count}"),
            None => f.write_str("? (its lookup gave no count)"),
        }
    }
}

/// A tool result in one line, for what certification saw.
fn summary(result: &CallToolResult) -> String {
    let text: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.as_str()))
        .collect();
    crate::text::message_line(&text.join(" "))
}
