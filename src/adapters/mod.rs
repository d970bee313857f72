//! Providers (reconciliation, compensation) and escalation sinks, configured
//! by name in the config file (`[providers.NAME]`, `[sinks.NAME]`). Every
//! call is bounded by the adapter's timeout; secrets come from environment
//! variables, never from the file, and never reach evidence or logs.

pub mod percent;
pub mod provider;
pub mod secrets;
pub mod sink;
pub mod template;

mod http_call;
mod process;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// How to reach one provider: `kind = "http"` or `kind = "command"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ProviderConfig {
    Http(Box<provider::http::HttpProviderConfig>),
    Command(provider::command::CommandProviderConfig),
}

/// Where escalations go: `kind = "webhook" | "pagerduty" | "command" | "desktop"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SinkConfig {
    Webhook(sink::webhook::WebhookConfig),
    Pagerduty(sink::pagerduty::PagerDutyConfig),
    Command(sink::command::CommandSinkConfig),
    Desktop(sink::desktop::DesktopConfig),
}

impl ProviderConfig {
    /// The environment variables this provider takes secrets from, each
    /// with what it is for.
    pub fn secret_variables(&self) -> Vec<(String, String)> {
        let ProviderConfig::Http(config) = self else {
            return Vec::new();
        };
        let templates = config
            .lookup
            .iter()
            .enumerate()
            .map(|(index, template)| (format!("lookup[{index}]"), template))
            .chain(
                config
                    .compensate
                    .iter()
                    .map(|t| ("compensate".to_string(), t)),
            );
        let mut variables = header_variables(&config.headers);
        for (name, template) in templates {
            for (parameter, value) in &template.query {
                if let ValueConfig::Env { env, .. } = value {
                    variables.push((env.clone(), format!("{name} query {parameter}")));
                }
            }
        }
        variables
    }

    pub fn timeout(&self) -> Duration {
        match self {
            ProviderConfig::Http(config) => Duration::from_millis(config.timeout_ms),
            ProviderConfig::Command(config) => Duration::from_millis(config.timeout_ms),
        }
    }

    /// Everything that keeps this provider from being built, one line
    /// each, checked without a network or the environment.
    pub fn problems(&self) -> Vec<String> {
        match self {
            ProviderConfig::Http(config) => provider::http::problems(config),
            ProviderConfig::Command(config) => provider::command::problems(config),
        }
    }
}

impl SinkConfig {
    /// The environment variables this sink takes secrets from, each with
    /// what it is for.
    pub fn secret_variables(&self) -> Vec<(String, String)> {
        match self {
            SinkConfig::Webhook(config) => config
                .url_env
                .iter()
                .map(|variable| (variable.clone(), "url_env".to_string()))
                .chain(header_variables(&config.headers))
                .collect(),
            SinkConfig::Pagerduty(config) => {
                vec![(
                    config.routing_key_env.clone(),
                    "routing_key_env".to_string(),
                )]
            }
            SinkConfig::Command(_) | SinkConfig::Desktop(_) => Vec::new(),
        }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(match self {
            SinkConfig::Webhook(config) => config.timeout_ms,
            SinkConfig::Pagerduty(config) => config.timeout_ms,
            SinkConfig::Command(config) => config.timeout_ms,
            SinkConfig::Desktop(config) => config.timeout_ms,
        })
    }

    pub fn retry(&self) -> &RetryConfig {
        match self {
            SinkConfig::Webhook(config) => &config.retry,
            SinkConfig::Pagerduty(config) => &config.retry,
            SinkConfig::Command(config) => &config.retry,
            SinkConfig::Desktop(config) => &config.retry,
        }
    }

    /// Everything that keeps this sink from being built, one line each,
    /// checked without a network or the environment.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.timeout().is_zero() {
            problems.push("timeout_ms must be above 0".to_string());
        }
        problems.extend(match self {
            SinkConfig::Webhook(config) => sink::webhook::problems(config),
            SinkConfig::Pagerduty(config) => sink::pagerduty::problems(config),
            SinkConfig::Command(config) => sink::command::problems(config),
            SinkConfig::Desktop(_) => Vec::new(),
        });
        problems
    }
}

/// A header or query value: a literal, or taken from an environment
/// variable when the request is made
/// (`Authorization = { env = "PAY_TOKEN", prefix = "Bearer " }`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ValueConfig {
    Literal(String),
    Env {
        env: String,
        #[serde(default)]
        prefix: String,
    },
}

impl ValueConfig {
    /// The value now, reading the environment; the error names the
    /// variable and what it is for (`header Authorization`), never a value.
    pub(crate) fn resolve(&self, what: &str) -> Result<String, String> {
        match self {
            ValueConfig::Literal(text) => Ok(text.clone()),
            ValueConfig::Env { env, prefix } => match std::env::var(env) {
                Ok(secret) if !secret.is_empty() => Ok(format!("{prefix}{secret}")),
                _ => Err(format!(
                    "environment variable {env} (for {what}) is not set"
                )),
            },
        }
    }
}

/// Delivery retries: the wait doubles from `base_ms` after each failure, up
/// to `max_secs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    pub base_ms: u64,
    pub max_secs: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            base_ms: 2_000,
            max_secs: 900,
        }
    }
}

impl RetryConfig {
    /// The wait after failed attempt number `attempt` (1-based).
    pub fn backoff(&self, attempt: i32) -> Duration {
        let exponent = attempt.saturating_sub(1).clamp(0, 30) as u32;
        let wait_ms = self.base_ms.saturating_mul(1u64 << exponent);
        Duration::from_millis(wait_ms.min(self.max_secs.saturating_mul(1000)))
    }
}

fn header_variables(headers: &BTreeMap<String, ValueConfig>) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(name, value)| match value {
            ValueConfig::Env { env, .. } => Some((env.clone(), format!("header {name}"))),
            ValueConfig::Literal(_) => None,
        })
        .collect()
}

/// Resolves configured headers now, reading environment variables; the
/// error names the variable, never a value.
pub(crate) fn resolve_headers(
    headers: &BTreeMap<String, ValueConfig>,
) -> Result<Vec<(String, String)>, String> {
    headers
        .iter()
        .map(|(name, value)| Ok((name.clone(), value.resolve(&format!("header {name}"))?)))
        .collect()
}

/// What is wrong with headers as configured, one line each: a literal
/// credential is refused, so a secret never sits in the config file.
pub(crate) fn header_problems(headers: &BTreeMap<String, ValueConfig>) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, value) in headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            problems.push(format!("{name:?} is not a valid header name"));
            continue;
        }
        let ValueConfig::Literal(text) = value else {
            continue;
        };
        if secrets::looks_secret(name) {
            problems.push(format!(
                "header {name} looks like a credential: take it from the environment, {name} = {{ env = \"VARIABLE\" }}, never from the file"
            ));
        } else if reqwest::header::HeaderValue::from_str(text).is_err() {
            problems.push(format!(
                "header {name}: the value is not a valid header value"
            ));
        }
    }
    problems
}

/// Nothing wrong, or every problem on one line.
pub(crate) fn all_clear(problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

pub(crate) fn default_timeout_ms() -> u64 {
    5_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Both {
        providers: BTreeMap<String, ProviderConfig>,
        sinks: BTreeMap<String, SinkConfig>,
    }

    #[test]
    fn configs_parse_by_kind_and_reject_unknown_fields() {
        let text = r#"
            [providers.pay]
            kind = "http"
            base_url = "http://127.0.0.1:9"
            timeout_ms = 1500
            headers.Authorization = { env = "PAY_TOKEN", prefix = "Bearer " }
            [[providers.pay.lookup]]
            path = "/v1/effects"
            query = { idempotency_key = "{key}" }
            effects = "/data"
            [providers.cli]
            kind = "command"
            program = "/bin/cat"
            [sinks.ops]
            kind = "webhook"
            url = "http://127.0.0.1:9/hook"
            [sinks.pd]
            kind = "pagerduty"
            routing_key_env = "PD_KEY"
            [sinks.desk]
            kind = "desktop"
        "#;
        let both: Both = toml::from_str(text).unwrap();
        assert_eq!(both.providers["pay"].timeout(), Duration::from_millis(1500));
        assert_eq!(
            both.providers["cli"].timeout(),
            Duration::from_millis(10_000)
        );
        assert!(matches!(both.sinks["pd"], SinkConfig::Pagerduty(_)));
        assert_eq!(both.sinks["desk"].timeout(), Duration::from_millis(2_000));

        let bad = "[providers.pay]\nkind = \"http\"\nbase_url = \"x\"\ncolour = 1\n";
        let error = toml::from_str::<Both>(&format!("{bad}[sinks]\n")).unwrap_err();
        assert!(error.to_string().contains("colour"), "{error}");
        let unknown_kind = "[providers.pay]\nkind = \"smtp\"\n[sinks]\n";
        assert!(toml::from_str::<Both>(unknown_kind).is_err());
    }

    #[test]
    fn literal_credentials_are_refused() {
        let mut headers = BTreeMap::new();
        headers.insert(
            "Authorization".to_string(),
            ValueConfig::Literal("Bearer x".into()),
        );
        assert!(header_problems(&headers)[0].contains("env"));
        headers.clear();
        headers.insert("X-Api-Key".to_string(), ValueConfig::Literal("k".into()));
        assert_eq!(header_problems(&headers).len(), 1);
        headers.clear();
        headers.insert(
            "Accept".to_string(),
            ValueConfig::Literal("application/json".into()),
        );
        assert!(header_problems(&headers).is_empty());
        headers.insert("X-Note".to_string(), ValueConfig::Literal("a\nb".into()));
        headers.insert(
            "Cookie".to_string(),
            ValueConfig::Literal("session=1".into()),
        );
        // Every problem, not the first one.
        assert_eq!(header_problems(&headers).len(), 2);
    }

    #[test]
    fn missing_secret_names_the_variable_only() {
        let mut headers = BTreeMap::new();
        headers.insert(
            "Authorization".to_string(),
            ValueConfig::Env {
                env: "EFFECTWATCH_TEST_SURELY_UNSET".into(),
                prefix: "Bearer ".into(),
            },
        );
        let error = resolve_headers(&headers).unwrap_err();
        assert!(error.contains("EFFECTWATCH_TEST_SURELY_UNSET"), "{error}");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let retry = RetryConfig {
            base_ms: 100,
            max_secs: 1,
        };
        assert_eq!(retry.backoff(1), Duration::from_millis(100));
        assert_eq!(retry.backoff(2), Duration::from_millis(200));
        assert_eq!(retry.backoff(5), Duration::from_millis(1000));
        assert_eq!(retry.backoff(i32::MAX), Duration::from_millis(1000));
        assert_eq!(retry.backoff(0), Duration::from_millis(100));
    }
}
