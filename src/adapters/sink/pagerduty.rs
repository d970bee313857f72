//! PagerDuty Events API v2: a trigger whose dedup_key is the escalation
//! key, so retried deliveries are one incident; acknowledge and resolve
//! events close it.

use std::time::Duration;

use reqwest::{Client, Method, Url};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Closing, SinkError, summary_line};
use crate::adapters::secrets::{redact_url, url_credentials};
use crate::adapters::{RetryConfig, all_clear, default_timeout_ms, http_call};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagerDutyConfig {
    #[serde(default = "default_url")]
    pub url: String,
    /// The environment variable holding the integration's routing key.
    pub routing_key_env: String,
    #[serde(default = "default_severity")]
    pub severity: String,
    #[serde(default = "default_source")]
    pub source: String,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub retry: RetryConfig,
}

fn default_url() -> String {
    "https://events.pagerduty.com/v2/enqueue".into()
}

fn default_severity() -> String {
    "error".into()
}

fn default_source() -> String {
    "effectwatch".into()
}

#[derive(Debug, Clone)]
pub struct PagerDutySink {
    config: PagerDutyConfig,
    url: Url,
    client: Client,
    timeout: Duration,
}

/// Everything wrong with a PagerDuty sink's configuration, one line each.
pub fn problems(config: &PagerDutyConfig) -> Vec<String> {
    let mut problems = Vec::new();
    if let Err(error) = Url::parse(&config.url) {
        problems.push(format!("url {:?}: {error}", redact_url(&config.url)));
    }
    for credential in url_credentials(&config.url, &|_| false) {
        problems.push(format!(
            "url: {credential}: the routing key is the only credential, \
             taken from the environment (routing_key_env)"
        ));
    }
    if !matches!(
        config.severity.as_str(),
        "critical" | "error" | "warning" | "info"
    ) {
        problems.push(format!(
            "severity {:?} must be critical, error, warning or info",
            config.severity
        ));
    }
    if config.routing_key_env.trim().is_empty() {
        problems.push("routing_key_env names no variable".into());
    }
    problems
}

impl PagerDutySink {
    pub fn build(config: &PagerDutyConfig, timeout: Duration) -> Result<PagerDutySink, String> {
        all_clear(problems(config))?;
        let url = Url::parse(&config.url)
            .map_err(|error| format!("url {:?}: {error}", redact_url(&config.url)))?;
        Ok(PagerDutySink {
            config: config.clone(),
            url,
            client: http_call::client(timeout)?,
            timeout,
        })
    }

    fn routing_key(&self) -> Result<String, SinkError> {
        match std::env::var(&self.config.routing_key_env) {
            Ok(key) if !key.is_empty() => Ok(key),
            _ => Err(SinkError::Config(format!(
                "environment variable {} (the routing key) is not set",
                self.config.routing_key_env
            ))),
        }
    }

    async fn send(&self, event: &Value) -> Result<(), SinkError> {
        let answer = http_call::send(
            &self.client,
            Method::POST,
            self.url.clone(),
            &[],
            Some(event),
            self.timeout,
        )
        .await
        .map_err(|error| SinkError::Failed(error.to_string()))?;
        if answer.is_success() {
            Ok(())
        } else {
            Err(SinkError::Failed(format!(
                "PagerDuty answered HTTP {}: {}",
                answer.status,
                answer.excerpt()
            )))
        }
    }

    pub fn event(&self, routing_key: &str, escalation_key: &str, payload: &Value) -> Value {
        let summary: String = summary_line(payload).chars().take(1024).collect();
        json!({
            "routing_key": routing_key,
            "event_action": "trigger",
            "dedup_key": escalation_key,
            "payload": {
                "summary": summary,
                "source": self.config.source,
                "severity": self.config.severity,
                "component": payload.pointer("/effect/action"),
                "group": payload.pointer("/effect/target"),
                "class": payload.get("decision"),
                "custom_details": payload,
            },
        })
    }

    pub async fn deliver(&self, escalation_key: &str, payload: &Value) -> Result<(), SinkError> {
        let routing_key = self.routing_key()?;
        self.send(&self.event(&routing_key, escalation_key, payload))
            .await
    }

    pub async fn close(&self, escalation_key: &str, closing: Closing) -> Result<(), SinkError> {
        let routing_key = self.routing_key()?;
        let action = match closing {
            Closing::Acknowledged => "acknowledge",
            Closing::Resolved => "resolve",
        };
        self.send(&json!({ "routing_key": routing_key, "event_action": action,
                           "dedup_key": escalation_key }))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_has_the_events_v2_shape() {
        let config: PagerDutyConfig = toml::from_str("routing_key_env = \"PD\"\n").unwrap();
        let sink = PagerDutySink::build(&config, Duration::from_secs(1)).unwrap();
        let payload = json!({"decision": "duplicate", "effect": {"op_key": "k", "action": "refund", "target": "t"}});
        let event = sink.event("rk", "escalate:k:duplicate", &payload);
        assert_eq!(event["event_action"], "trigger");
        assert_eq!(event["dedup_key"], "escalate:k:duplicate");
        assert_eq!(event["payload"]["severity"], "error");
        assert_eq!(event["payload"]["custom_details"], payload);
        assert!(event["payload"]["summary"].as_str().unwrap().len() <= 1024);
        let bad: PagerDutyConfig =
            toml::from_str("routing_key_env = \"PD\"\nseverity = \"panic\"\n").unwrap();
        assert!(PagerDutySink::build(&bad, Duration::from_secs(1)).is_err());
    }
}
