//! What a tool server tells the gateway of a call's outcome by structure:
//! `_meta["io.effectwatch/outcome"]` on its result. It is honoured before
//! any wording, because an SDK may hide an error's text (the Python MCP SDK
//! 2.x answers "Error executing tool refund" whatever the provider said),
//! and a decline read as "maybe done" becomes a person's work item for
//! something that certainly did not happen.

use rmcp::model::CallToolResult;
use serde_json::Value;

/// The result's `_meta` field naming the outcome.
pub const OUTCOME_META: &str = "io.effectwatch/outcome";
/// With `performed`: the provider's record of the effect.
pub const PROVIDER_REF_META: &str = "io.effectwatch/provider_ref";
/// With `not_performed`: the same call may succeed later.
pub const RETRYABLE_META: &str = "io.effectwatch/retryable";

/// The outcome a tool server stated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Told {
    /// Done; the provider's reference when the server gave one.
    Performed { provider_ref: Option<String> },
    /// Nothing was done: a decline, arguments the provider refused.
    NotPerformed { retryable: bool },
    /// The server itself does not know (its provider did not answer).
    Unknown,
}

/// The outcome stated in `result`, `None` when it states none. A value the
/// gateway does not know is no statement: it is logged and the call is
/// judged as if unsigned, never read as "nothing was done".
pub fn told_outcome(result: &CallToolResult) -> Option<Told> {
    let meta = &result.meta.as_ref()?.0;
    let said = meta.get(OUTCOME_META)?;
    match said.as_str() {
        Some("performed") => Some(Told::Performed {
            provider_ref: meta.get(PROVIDER_REF_META).and_then(reference),
        }),
        Some("not_performed") => Some(Told::NotPerformed {
            retryable: meta.get(RETRYABLE_META) == Some(&Value::Bool(true)),
        }),
        Some("unknown") => Some(Told::Unknown),
        _ => {
            tracing::warn!(
                outcome = %crate::text::message_line(&said.to_string()),
                "a tool result's {OUTCOME_META} is none of performed, not_performed, unknown: judged as if unsigned"
            );
            None
        }
    }
}

/// A reference as the ledger keeps it: a string, or a number written out.
pub fn reference(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ContentBlock, MetaObject};
    use serde_json::json;

    fn with_meta(error: bool, meta: Value) -> CallToolResult {
        let mut result = if error {
            CallToolResult::error(vec![ContentBlock::text("Error executing tool refund")])
        } else {
            CallToolResult::success(vec![ContentBlock::text("ok")])
        };
        result.meta = Some(MetaObject(meta.as_object().cloned().unwrap_or_default()));
        result
    }

    #[test]
    fn each_stated_outcome_is_read_whatever_the_error_flag() {
        let declined = with_meta(true, json!({ OUTCOME_META: "not_performed" }));
        assert_eq!(
            told_outcome(&declined),
            Some(Told::NotPerformed { retryable: false })
        );
        let later = with_meta(
            true,
            json!({ OUTCOME_META: "not_performed", RETRYABLE_META: true }),
        );
        assert_eq!(
            told_outcome(&later),
            Some(Told::NotPerformed { retryable: true })
        );
        let done = with_meta(
            false,
            json!({ OUTCOME_META: "performed", PROVIDER_REF_META: 17 }),
        );
        assert_eq!(
            told_outcome(&done),
            Some(Told::Performed {
                provider_ref: Some("17".into())
            })
        );
        let unsure = with_meta(true, json!({ OUTCOME_META: "unknown" }));
        assert_eq!(told_outcome(&unsure), Some(Told::Unknown));
    }

    #[test]
    fn an_unknown_or_missing_statement_is_no_statement() {
        assert_eq!(
            told_outcome(&with_meta(true, json!({ OUTCOME_META: "declined" }))),
            None
        );
        assert_eq!(
            told_outcome(&with_meta(true, json!({ OUTCOME_META: false }))),
            None
        );
        assert_eq!(told_outcome(&with_meta(true, json!({}))), None);
        assert_eq!(
            told_outcome(&CallToolResult::error(vec![ContentBlock::text("x")])),
            None
        );
    }
}
