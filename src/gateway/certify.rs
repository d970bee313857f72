//! `effectwatch gateway certify`: the seeds' release checklist, run against
//! a staging tool server and a staging ledger. Standing where the gateway
//! stands, certification makes the failures itself — the call twice, at
//! once, its reply dropped, the caller dead after dispatch, a retry that
//! reaches the tool server again, a changed parameter under the old key, a
//! late answer — and judges each by the tool server's own state, read
//! through the read-only lookup tool the policy names, not by the ledger
//! alone.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RoleClient};
use serde::Serialize;
use serde_json::{Map, Value};

use super::policy::{MappedCall, ToolRule};
use super::proxy::{Gateway, OP_KEY_META};
use crate::ledger::writer::{self, Completion, ErrorClass, Outcome};

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

pub struct Certification {
    gateway: Gateway,
    tool: String,
    rule: ToolRule,
    arguments: Map<String, Value>,
    run: String,
    lookup: Option<(String, String)>,
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
        let run = format!(
            "{:x}",
            std::process::id() ^ chrono::Utc::now().timestamp() as u32
        );
        Ok(Certification {
            gateway: gateway.with_in_flight_wait(ABANDONED_WAIT),
            tool: tool.to_string(),
            rule,
            arguments,
            run,
            lookup,
        })
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
    /// every string argument the key is made of gets the case's tag.
    fn arguments_for(&self, case: &str) -> Map<String, Value> {
        let mut arguments = self.arguments.clone();
        for name in self.rule.key_arguments() {
            if let Some(Value::String(text)) = arguments.get_mut(&name) {
                text.push_str(&format!("-{case}-{}", self.run));
            }
        }
        arguments
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

    /// How many effects the tool server holds for these arguments, by its
    /// lookup tool; `None` when there is no lookup or it cannot be read.
    async fn provider_count(&self, arguments: &Map<String, Value>) -> Option<u64> {
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
        sqlx::query_scalar::<_, String>("select state from ledger.effects where op_key = $1")
            .bind(op_key)
            .fetch_optional(self.gateway.pool())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| "absent".into())
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
            same && count == Some(1),
            format!(
                "second answer the same: {same}; provider holds {count:?}; {}",
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
            count == Some(1) && agreed,
            format!("4 at once; provider holds {count:?}; every answer the same: {agreed}"),
        )
    }

    /// Begins and claims the effect as the gateway would, for a case that
    /// then breaks the call on purpose.
    async fn claimed(&self, call: &MappedCall, tag: &str) -> Result<(), String> {
        let requested_by = self.gateway.policy().requested_by();
        let intent = call.intent(&requested_by, format!("certify:{}:{tag}", self.run));
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
            &requested_by,
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
                worker: Some(self.gateway.policy().requested_by()),
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
            // The tool acts; its answer is dropped on the way back.
            let _dropped = self
                .straight_to_the_tool(&peer, &arguments, &call.op_key)
                .await;
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
            state == "unknown" && refused && count == Some(1),
            format!("ledger {state}; the repeat refused: {refused}; provider holds {count:?}"),
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
            self.straight_to_the_tool(&peer, &arguments, &call.op_key)
                .await
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
            refused && count == Some(1),
            format!(
                "the repeat refused: {refused}; provider holds {count:?}; {}",
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
            first.is_ok() && second.is_ok() && count == Some(1),
            format!(
                "the same key sent twice past the ledger; provider holds {count:?} (a tool server that passes {OP_KEY_META} to its provider as the idempotency key holds one)"
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
            first.is_error != Some(true) && refused && count == Some(1),
            format!("{name} changed; refused: {refused}; provider holds {count:?}"),
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
                && count == Some(1),
            format!(
                "late answer applied: {}; contrary message applied: {}; ledger {state}; the next call replays it: {}; provider holds {count:?}",
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
                && counts == (Some(1), Some(1)),
            format!("provider holds {:?} and {:?}", counts.0, counts.1),
        )
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
