//! The gateway's policy file: which MCP tools change the world, and how a
//! call to one becomes an effect — its action, a key and a target built from
//! the call's business arguments (never from a request id, which changes on
//! every retry), which arguments are its params and its money.
//!
//! ```toml
//! alias = "billing"                 # the effects' requested_by: gateway:billing
//! result_limit_bytes = 16384        # a larger tool result is stored summarised
//! upstream_timeout_secs = 30        # no answer by then: the outcome is unknown
//! heartbeat_lease_secs = 15         # a call out is beaten for; the gateway gone, it is unknown within this (0: off)
//! replays = "caller"                # a repeat's stored answer goes only to the caller that made it
//!
//! [tools.refund]
//! action = "refund"
//! op_key = "refund:{order_id}:{amount_minor}"
//! target = "invoice:{order_id}"
//! normalise = { order_id = ["trim", "upper"] }  # " inv-7" and "INV-7" are one invoice
//! params = ["order_id", "amount_minor", "currency"]
//! amount_minor = "amount_minor"     # the argument holding the amount, in minor units
//! currency = "currency"             # the argument holding the currency
//! provider = "fakepay"
//! external_ref = "id"               # the field of the structured result naming the provider's record
//! refused_when = ["declined"]       # words in a tool error that mean nothing was done
//! lookup = "lookup_refunds"         # certification: the read-only tool that shows the provider's state
//! lookup_count = "count"            # … and the field of its result that counts the effects
//!
//! [tools.lookup_refunds]
//! read_only = true
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rmcp::model::Tool;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::key_form::{self, Normaliser, placeholders};
use unicode_security::confusable_detection::skeleton;

/// The default size above which a tool's result is stored summarised.
pub const DEFAULT_RESULT_LIMIT: usize = 16 * 1024;
/// The default time the upstream has to answer a recorded call.
pub const DEFAULT_UPSTREAM_TIMEOUT_SECS: u64 = 30;
/// The default heartbeat lease of a call out to the tool server.
pub const DEFAULT_HEARTBEAT_LEASE_SECS: u64 = 15;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Names the gateway in the ledger: `requested_by = gateway:<alias>`.
    pub alias: String,
    #[serde(default)]
    pub result_limit_bytes: Option<usize>,
    #[serde(default)]
    pub upstream_timeout_secs: Option<u64>,
    /// While a recorded call is out to the tool server, the gateway beats
    /// for its effect every third of this; if the gateway dies, the effect
    /// is unknown once the lease ends instead of at the end of its window.
    #[serde(default)]
    pub heartbeat_lease_secs: Option<u64>,
    /// Who a repeated call is answered to (the stored result, the state).
    #[serde(default)]
    pub replays: Replays,
    #[serde(default)]
    pub tools: BTreeMap<String, ToolRule>,
}

/// Who a repeated call is answered to. The gateway is one login for all its
/// callers, so the ledger cannot tell them apart: the gateway does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Replays {
    /// Only the caller that made the effect: over HTTP, callers are told
    /// apart by their Authorization header (a hash of it is recorded with
    /// the effect, never the header); a caller without one, and stdio's
    /// single caller, are one anonymous caller.
    #[default]
    Caller,
    /// Every caller of this gateway is one tenant: any of them is answered.
    Tenant,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    /// A tool that only reads: relayed untouched and unrecorded.
    #[serde(default)]
    pub read_only: bool,
    pub action: Option<String>,
    pub op_key: Option<String>,
    pub target: Option<String>,
    /// The arguments stored as the effect's params (and compared on a
    /// repeated key); anything else — a credential, a note — never is.
    #[serde(default)]
    pub params: Vec<String>,
    pub amount_minor: Option<String>,
    pub currency: Option<String>,
    pub provider: Option<String>,
    pub external_ref: Option<String>,
    #[serde(default)]
    pub refused_when: Vec<String>,
    /// Per argument, what makes two spellings of one identifier one
    /// (`order_id = ["trim", "upper"]`); nothing is normalised unless named.
    #[serde(default)]
    pub normalise: BTreeMap<String, Vec<Normaliser>>,
    /// For certification: a read-only tool of the same server that looks up
    /// what the provider holds for a call's arguments …
    pub lookup: Option<String>,
    /// … and the field of its structured result that counts it.
    pub lookup_count: Option<String>,
}

/// A tool call mapped to an effect, ready for `begin_effect`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MappedCall {
    pub action: String,
    pub op_key: String,
    pub target: String,
    pub params: Value,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub provider: Option<String>,
    /// The call's arguments as the tool server gets them: those the rule
    /// reads in their canonical form (so the tool acts on the amount and
    /// the identifier the key was made of), the rest as they came.
    pub arguments: Map<String, Value>,
}

impl MappedCall {
    /// The intent `begin_effect` records for this call, made by
    /// `requested_by` in the request `request_id`.
    pub fn intent(&self, requested_by: &str, request_id: String) -> crate::ledger::writer::Intent {
        crate::ledger::writer::Intent {
            op_key: self.op_key.clone(),
            action: self.action.clone(),
            target: self.target.clone(),
            params: self.params.clone(),
            requested_by: requested_by.to_string(),
            amount_minor: self.amount_minor,
            currency: self.currency.clone(),
            provider: self.provider.clone(),
            request_id: Some(request_id),
            ..Default::default()
        }
    }
}

/// What the gateway does with a call to one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Recorded in the ledger under the tool's rule.
    Recorded,
    /// Relayed untouched: the policy says it only reads.
    PassThrough,
    /// A tool that may change the world and has no rule: refused unless the
    /// gateway runs with `--allow-unmapped`.
    Unmapped,
    /// Another tool under a name that looks like a mapped one (`r\u{435}fund`
    /// beside `refund`): refused always, `--allow-unmapped` or not.
    Lookalike { of: String },
}

impl Policy {
    pub fn load(path: &Path) -> Result<Policy, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read the policy {}: {error}", path.display()))?;
        Policy::parse(&text).map_err(|error| format!("policy {}: {error}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Policy, String> {
        let policy: Policy = toml::from_str(text).map_err(|error| {
            crate::text::message_line(&error.to_string())
                .trim()
                .to_string()
        })?;
        if policy.alias.trim().is_empty() {
            return Err("alias is blank: it names the gateway in the ledger".into());
        }
        if let Some(lease @ 3601..) = policy.heartbeat_lease_secs {
            return Err(format!(
                "heartbeat_lease_secs = {lease}: a lease is at most 3600 seconds (0 turns heartbeats off)"
            ));
        }
        for (name, rule) in &policy.tools {
            rule.check_shape(name)?;
        }
        Ok(policy)
    }

    pub fn requested_by(&self) -> String {
        format!("gateway:{}", self.alias)
    }

    pub fn result_limit(&self) -> usize {
        self.result_limit_bytes.unwrap_or(DEFAULT_RESULT_LIMIT)
    }

    pub fn upstream_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(
            self.upstream_timeout_secs
                .unwrap_or(DEFAULT_UPSTREAM_TIMEOUT_SECS),
        )
    }

    /// The heartbeat lease of a call out to the tool server; None: off.
    pub fn heartbeat_lease(&self) -> Option<std::time::Duration> {
        match self
            .heartbeat_lease_secs
            .unwrap_or(DEFAULT_HEARTBEAT_LEASE_SECS)
        {
            0 => None,
            secs => Some(std::time::Duration::from_secs(secs)),
        }
    }

    /// How a call to the tool named `name` is handled. Only the policy
    /// decides: a tool's own annotations (`readOnlyHint`) are the tool
    /// server's claim, and a tool that claims to read while it moves money
    /// must not pass unrecorded.
    pub fn route(&self, name: &str) -> Route {
        match self.tools.get(name) {
            Some(rule) if rule.read_only => Route::PassThrough,
            Some(_) => Route::Recorded,
            None => match self.lookalike_of(name) {
                Some(of) => Route::Lookalike { of },
                None => Route::Unmapped,
            },
        }
    }

    /// The tool of the policy whose name `name` looks like without being it,
    /// compared by their Unicode confusable skeletons (UTS #39).
    fn lookalike_of(&self, name: &str) -> Option<String> {
        let looks: String = skeleton(name).collect();
        self.tools
            .keys()
            .find(|mapped| mapped.as_str() != name && skeleton(mapped).eq(looks.chars()))
            .cloned()
    }

    /// Checks the policy against the tools the upstream offers: every rule
    /// names a tool that exists, and every argument a rule uses is in the
    /// tool's input schema. All problems at once, one per line.
    pub fn check_against(&self, tools: &[Tool]) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        for (name, rule) in &self.tools {
            let Some(tool) = tools.iter().find(|tool| tool.name == name.as_str()) else {
                let offered: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
                problems.push(format!(
                    "the policy maps tool {name:?}, which the upstream does not offer (it offers: {})",
                    offered.join(", ")
                ));
                continue;
            };
            let known: BTreeSet<&str> = tool
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|properties| properties.keys().map(String::as_str).collect())
                .unwrap_or_default();
            for argument in rule.arguments_used() {
                if !known.contains(argument.as_str()) {
                    problems.push(format!(
                        "tool {name:?}: the policy uses argument {argument:?}, which the tool's input schema lacks (it has: {})",
                        known.iter().copied().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

impl ToolRule {
    fn check_shape(&self, name: &str) -> Result<(), String> {
        if self.read_only {
            return Ok(());
        }
        for (field, value) in [
            ("action", &self.action),
            ("op_key", &self.op_key),
            ("target", &self.target),
        ] {
            match value {
                Some(value) if !value.trim().is_empty() => {}
                _ => {
                    return Err(format!("tool {name:?} needs {field} (or read_only = true)"));
                }
            }
        }
        for template in [&self.op_key, &self.target].into_iter().flatten() {
            let placeholders = placeholders(template)
                .map_err(|error| format!("tool {name:?}: template {template:?}: {error}"))?;
            if placeholders.is_empty() {
                return Err(format!(
                    "tool {name:?}: template {template:?} uses no argument: every call would share one key"
                ));
            }
        }
        Ok(())
    }

    /// The arguments the key and the target are made of: what makes one
    /// business action another.
    pub fn key_arguments(&self) -> BTreeSet<String> {
        [&self.op_key, &self.target]
            .into_iter()
            .flatten()
            .flat_map(|template| placeholders(template).unwrap_or_default())
            .map(|placeholder| root_of(&placeholder).to_string())
            .collect()
    }

    fn arguments_used(&self) -> BTreeSet<String> {
        let mut used = BTreeSet::new();
        for template in [&self.op_key, &self.target].into_iter().flatten() {
            for placeholder in placeholders(template).unwrap_or_default() {
                used.insert(root_of(&placeholder).to_string());
            }
        }
        used.extend(self.params.iter().cloned());
        used.extend(self.amount_minor.iter().cloned());
        used.extend(self.currency.iter().cloned());
        used.extend(self.normalise.keys().cloned());
        used
    }

    /// The effect a call with these arguments is: its key, target, params
    /// and amount all made from the same canonical values, so a value
    /// written two ways is one action.
    pub fn map(&self, arguments: &Map<String, Value>) -> Result<MappedCall, String> {
        let canonical = key_form::canonical_arguments(
            arguments,
            &self.normalise,
            self.amount_minor.as_deref(),
        )?;
        let fill = |template: &Option<String>| {
            key_form::fill(template.as_deref().unwrap_or_default(), &canonical)
        };
        let params: Map<String, Value> = self
            .params
            .iter()
            .filter_map(|name| Some((name.clone(), canonical.get(name)?.clone())))
            .collect();
        let amount_minor = self
            .amount_minor
            .as_ref()
            .and_then(|name| canonical.get(name))
            .and_then(Value::as_i64);
        let currency = self
            .currency
            .as_ref()
            .and_then(|name| canonical.get(name))
            .and_then(Value::as_str)
            .map(str::to_string);
        let read = self.arguments_used();
        let forwarded = arguments
            .iter()
            .map(|(name, value)| match canonical.get(name) {
                Some(canonical) if read.contains(name) => (name.clone(), canonical.clone()),
                _ => (name.clone(), value.clone()),
            })
            .collect();
        Ok(MappedCall {
            action: self.action.clone().unwrap_or_default(),
            op_key: fill(&self.op_key)?,
            target: fill(&self.target)?,
            params: Value::Object(params),
            amount_minor,
            currency,
            provider: self.provider.clone(),
            arguments: forwarded,
        })
    }

    /// Whether a tool error's text says the action was not performed.
    pub fn says_refused(&self, text: &str) -> bool {
        let text = text.to_lowercase();
        self.refused_when
            .iter()
            .any(|word| !word.is_empty() && text.contains(&word.to_lowercase()))
    }
}

fn root_of(placeholder: &str) -> &str {
    placeholder.split('.').next().unwrap_or(placeholder)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn arguments(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn a_key_is_made_from_business_arguments_only() {
        let policy = Policy::parse(
            r#"
            alias = "billing"
            [tools.refund]
            action = "refund"
            op_key = "refund:{order_id}:{amount_minor}"
            target = "invoice:{order_id}"
            params = ["order_id", "amount_minor", "currency"]
            amount_minor = "amount_minor"
            currency = "currency"
            "#,
        )
        .unwrap();
        let rule = &policy.tools["refund"];
        let call = rule
            .map(&arguments(json!({
                "order_id": "INV-7", "amount_minor": 1500, "currency": "EUR", "api_key": "sk_live_x"
            })))
            .unwrap();
        assert_eq!(call.op_key, "refund:INV-7:1500");
        assert_eq!(call.target, "invoice:INV-7");
        assert_eq!(call.amount_minor, Some(1500));
        assert_eq!(
            call.params,
            json!({"order_id": "INV-7", "amount_minor": 1500, "currency": "EUR"})
        );
        assert!(!call.params.to_string().contains("sk_live"));
        let missing = rule
            .map(&arguments(json!({"amount_minor": 1500})))
            .unwrap_err();
        assert!(missing.contains("{order_id}"), "{missing}");
    }

    #[test]
    fn a_rule_without_a_key_or_with_a_constant_key_is_refused() {
        let no_key = Policy::parse(
            "alias = \"a\"\n[tools.refund]\naction = \"refund\"\ntarget = \"x:{id}\"\n",
        )
        .unwrap_err();
        assert!(no_key.contains("op_key"), "{no_key}");
        let constant = Policy::parse(
            "alias = \"a\"\n[tools.refund]\naction = \"refund\"\nop_key = \"refund\"\ntarget = \"x:{id}\"\n",
        )
        .unwrap_err();
        assert!(constant.contains("one key"), "{constant}");
        let unknown = Policy::parse("alias = \"a\"\n[tools.refund]\nread_only = true\nfoo = 1\n")
            .unwrap_err();
        assert!(unknown.contains("foo"), "{unknown}");
    }

    #[test]
    fn the_amount_written_four_ways_is_one_key_and_one_amount() {
        let policy = Policy::parse(
            r#"
            alias = "billing"
            [tools.refund]
            action = "refund"
            op_key = "refund:{order_id}:{amount_minor}"
            target = "invoice:{order_id}"
            normalise = { order_id = ["trim", "upper"] }
            params = ["order_id", "amount_minor", "currency"]
            amount_minor = "amount_minor"
            currency = "currency"
            "#,
        )
        .unwrap();
        let rule = &policy.tools["refund"];
        let calls: Vec<MappedCall> = [
            json!(1500),
            json!("01500"),
            json!("+1500"),
            json!(" 1500"),
            json!(1500.0),
        ]
        .into_iter()
        .map(|amount| {
            rule.map(&arguments(
                json!({"order_id": " inv-7", "amount_minor": amount, "currency": "EUR"}),
            ))
            .unwrap()
        })
        .collect();
        for call in &calls {
            assert_eq!(call, &calls[0]);
        }
        assert_eq!(calls[0].op_key, "refund:INV-7:1500");
        assert_eq!(calls[0].amount_minor, Some(1500));
        assert_eq!(
            calls[0].params,
            json!({"order_id": "INV-7", "amount_minor": 1500, "currency": "EUR"})
        );
        let fraction = rule
            .map(&arguments(
                json!({"order_id": "INV-7", "amount_minor": 1500.5}),
            ))
            .unwrap_err();
        assert!(
            fraction.contains("amount_minor") && fraction.contains("whole number"),
            "{fraction}"
        );
        let unknown = Policy::parse(
            "alias = \"a\"\n[tools.refund]\naction = \"refund\"\nop_key = \"r:{id}\"\ntarget = \"x:{id}\"\nnormalise = { id = [\"shout\"] }\n",
        )
        .unwrap_err();
        assert!(
            unknown.contains("shout") && unknown.contains("trim"),
            "{unknown}"
        );
    }

    #[test]
    fn literal_braces_and_nested_fields_render() {
        let rendered = key_form::fill(
            "{{literal}}:{customer.id}",
            &arguments(json!({"customer": {"id": 42}})),
        )
        .unwrap();
        assert_eq!(rendered, "{literal}:42");
    }
}
