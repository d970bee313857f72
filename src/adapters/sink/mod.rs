//! Escalation sinks: where a review item goes for a person. Each delivery
//! carries the escalation key, so a sink that deduplicates (PagerDuty's
//! dedup_key, a webhook's Idempotency-Key) turns a retried delivery into
//! the same page.

pub mod command;
pub mod desktop;
pub mod pagerduty;
pub mod webhook;

use std::time::Duration;

use serde_json::Value;
use thiserror::Error;

use super::secrets::redact_urls;
use super::{RetryConfig, SinkConfig, all_clear};
use crate::format::optional_money;
use crate::text::{sanitize_line, truncate};

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SinkError {
    /// Nothing was sent: the configuration cannot make this delivery.
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Failed(String),
}

/// How an escalation was closed, for sinks that track incidents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    Acknowledged,
    Resolved,
}

#[derive(Debug, Clone)]
pub struct Sink {
    name: String,
    kind: SinkKind,
    retry: RetryConfig,
    timeout: Duration,
}

#[derive(Debug, Clone)]
enum SinkKind {
    Webhook(webhook::WebhookSink),
    PagerDuty(pagerduty::PagerDutySink),
    Command(command::CommandSink),
    Desktop(desktop::DesktopSink),
}

impl Sink {
    pub fn build(name: &str, config: &SinkConfig) -> Result<Sink, SinkError> {
        let problem = |message: String| SinkError::Config(format!("sink {name}: {message}"));
        all_clear(config.problems()).map_err(problem)?;
        let timeout = config.timeout();
        let kind = match config {
            SinkConfig::Webhook(config) => {
                SinkKind::Webhook(webhook::WebhookSink::build(config, timeout).map_err(problem)?)
            }
            SinkConfig::Pagerduty(config) => SinkKind::PagerDuty(
                pagerduty::PagerDutySink::build(config, timeout).map_err(problem)?,
            ),
            SinkConfig::Command(config) => {
                SinkKind::Command(command::CommandSink::build(config).map_err(problem)?)
            }
            SinkConfig::Desktop(config) => SinkKind::Desktop(desktop::DesktopSink::build(config)),
        };
        Ok(Sink {
            name: name.to_string(),
            kind,
            retry: config.retry().clone(),
            timeout,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> &'static str {
        match self.kind {
            SinkKind::Webhook(_) => "webhook",
            SinkKind::PagerDuty(_) => "pagerduty",
            SinkKind::Command(_) => "command",
            SinkKind::Desktop(_) => "desktop",
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The wait before the next attempt after failed attempt `attempt`.
    pub fn backoff(&self, attempt: i32) -> Duration {
        self.retry.backoff(attempt)
    }

    /// One delivery attempt, bounded by the sink's timeout.
    pub async fn deliver(&self, escalation_key: &str, payload: &Value) -> Result<(), SinkError> {
        let attempt = async {
            match &self.kind {
                SinkKind::Webhook(sink) => sink.deliver(escalation_key, payload).await,
                SinkKind::PagerDuty(sink) => sink.deliver(escalation_key, payload).await,
                SinkKind::Command(sink) => {
                    sink.deliver(escalation_key, payload, self.timeout).await
                }
                SinkKind::Desktop(sink) => sink.deliver(payload).await,
            }
        };
        match tokio::time::timeout(self.timeout + Duration::from_millis(250), attempt).await {
            Ok(result) => result.map_err(SinkError::redacted),
            Err(_) => Err(SinkError::Failed(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    /// Tells the sink the loop is closed, where it keeps state (PagerDuty
    /// incidents). Returns whether anything was sent.
    pub async fn close(
        &self,
        escalation_key: &str,
        closing: Closing,
        operator: &str,
    ) -> Result<bool, SinkError> {
        let attempt = async {
            match &self.kind {
                SinkKind::PagerDuty(sink) => {
                    sink.close(escalation_key, closing).await.map(|()| true)
                }
                SinkKind::Webhook(sink) => sink
                    .close(escalation_key, closing, operator)
                    .await
                    .map(|()| true),
                SinkKind::Command(_) | SinkKind::Desktop(_) => Ok(false),
            }
        };
        match tokio::time::timeout(self.timeout + Duration::from_millis(250), attempt).await {
            Ok(result) => result.map_err(SinkError::redacted),
            Err(_) => Err(SinkError::Failed(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }
}

impl SinkError {
    /// The same error with any URL in it redacted: it becomes the
    /// escalation's last_error, which every operator reads.
    fn redacted(self) -> SinkError {
        match self {
            SinkError::Config(message) => SinkError::Config(redact_urls(&message)),
            SinkError::Failed(message) => SinkError::Failed(redact_urls(&message)),
        }
    }
}

fn field<'a>(payload: &'a Value, pointer: &str) -> &'a str {
    payload
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("?")
}

/// One line a person reads first: the key, the decision, the state and
/// amount, who escalated and why. Safe for any terminal or chat.
pub fn summary_line(payload: &Value) -> String {
    let amount = optional_money(
        payload
            .pointer("/effect/amount_minor")
            .and_then(Value::as_i64),
        payload.pointer("/effect/currency").and_then(Value::as_str),
    );
    let text = format!(
        "effectwatch: decision needed on {} ({}, {}, {amount}): {} — escalated by {}: {}",
        field(payload, "/effect/op_key"),
        field(payload, "/effect/action"),
        field(payload, "/effect/state"),
        field(payload, "/decision_needed"),
        field(payload, "/escalated_by"),
        field(payload, "/reason"),
    );
    truncate(&sanitize_line(&text), 1000)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn summary_is_one_safe_line() {
        let payload = json!({
            "decision_needed": "Reconcile it",
            "escalated_by": "alice",
            "reason": "stuck\nfor \u{1b}[2J an hour",
            "effect": {"op_key": "refund:\u{202e}1", "action": "refund", "state": "unknown",
                       "amount_minor": 1500, "currency": "EUR"}
        });
        let line = summary_line(&payload);
        assert!(line.contains("15.00 EUR"), "{line}");
        assert!(!line.contains('\n') && !line.contains('\u{1b}') && !line.contains('\u{202e}'));
    }
}
