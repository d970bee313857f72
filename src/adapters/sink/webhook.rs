//! A webhook: the escalation as JSON, with a Slack-compatible `text`, and
//! the escalation key as its Idempotency-Key header.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{Client, Method, Url};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Closing, SinkError, summary_line};
use crate::adapters::http_call;
use crate::adapters::secrets::{redact_url, url_credentials};
use crate::adapters::{
    RetryConfig, ValueConfig, all_clear, default_timeout_ms, header_problems, resolve_headers,
};
use crate::text::sanitize_line;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The URL, when it holds no secret.
    pub url: Option<String>,
    /// An environment variable holding the URL (Slack's URLs are secrets).
    pub url_env: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, ValueConfig>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub retry: RetryConfig,
}

#[derive(Debug, Clone)]
pub struct WebhookSink {
    config: WebhookConfig,
    client: Client,
    timeout: Duration,
}

/// Everything wrong with a webhook's configuration, one line each.
pub fn problems(config: &WebhookConfig) -> Vec<String> {
    let mut problems = Vec::new();
    match (&config.url, &config.url_env) {
        (Some(url), None) => {
            problems.extend(parse_url(url).err());
            for credential in url_credentials(url, &|_| false) {
                problems.push(format!(
                    "url: {credential}: a URL that holds a secret is taken from the \
                     environment, url_env = \"VARIABLE\", never from the file"
                ));
            }
        }
        (None, Some(_)) => {}
        _ => problems.push("set exactly one of url and url_env".into()),
    }
    problems.extend(header_problems(&config.headers));
    problems
}

impl WebhookSink {
    pub fn build(config: &WebhookConfig, timeout: Duration) -> Result<WebhookSink, String> {
        all_clear(problems(config))?;
        Ok(WebhookSink {
            config: config.clone(),
            client: http_call::client(timeout)?,
            timeout,
        })
    }

    fn url(&self) -> Result<Url, SinkError> {
        let text = match (&self.config.url, &self.config.url_env) {
            (Some(url), _) => url.clone(),
            (None, Some(variable)) => std::env::var(variable).map_err(|_| {
                SinkError::Config(format!(
                    "environment variable {variable} (the webhook URL) is not set"
                ))
            })?,
            (None, None) => return Err(SinkError::Config("no URL configured".into())),
        };
        parse_url(&text).map_err(SinkError::Config)
    }

    async fn post(&self, escalation_key: &str, body: &Value) -> Result<(), SinkError> {
        let url = self.url()?;
        let mut headers = resolve_headers(&self.config.headers).map_err(SinkError::Config)?;
        headers.retain(|(name, _)| !name.eq_ignore_ascii_case("idempotency-key"));
        headers.push(("Idempotency-Key".to_string(), escalation_key.to_string()));
        let answer = http_call::send(
            &self.client,
            Method::POST,
            url,
            &headers,
            Some(body),
            self.timeout,
        )
        .await
        .map_err(|error| SinkError::Failed(error.to_string()))?;
        if answer.is_success() {
            Ok(())
        } else {
            Err(SinkError::Failed(format!(
                "the webhook answered HTTP {}: {}",
                answer.status,
                answer.excerpt()
            )))
        }
    }

    pub async fn deliver(&self, escalation_key: &str, payload: &Value) -> Result<(), SinkError> {
        let mut body = payload.clone();
        if let Value::Object(map) = &mut body {
            map.insert("text".into(), json!(slack_escape(&summary_line(payload))));
        }
        self.post(escalation_key, &body).await
    }

    pub async fn close(
        &self,
        escalation_key: &str,
        closing: Closing,
        operator: &str,
    ) -> Result<(), SinkError> {
        let word = match closing {
            Closing::Acknowledged => "acknowledged",
            Closing::Resolved => "resolved",
        };
        let text = format!(
            "effectwatch: escalation {} {word} by {}",
            sanitize_line(escalation_key),
            sanitize_line(operator)
        );
        let body = json!({ "escalation_key": escalation_key, "event": word, "by": operator,
                           "text": slack_escape(&text) });
        // A different key: the follow-up is a message of its own.
        self.post(&format!("{escalation_key}:{word}"), &body).await
    }
}

fn parse_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|error| format!("the webhook URL is invalid: {error}"))?;
    if matches!(url.scheme(), "http" | "https") {
        Ok(url)
    } else {
        Err(format!(
            "the webhook URL {} is not http(s)",
            redact_url(text)
        ))
    }
}

/// Slack reads `<…>` as links and mentions: untrusted text must not make any.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_markup_is_neutralised() {
        assert_eq!(
            slack_escape("<!channel> & <http://x|y>"),
            "&lt;!channel&gt; &amp; &lt;http://x|y&gt;"
        );
    }

    #[test]
    fn exactly_one_url_source() {
        let config = WebhookConfig {
            url: None,
            url_env: None,
            headers: BTreeMap::new(),
            timeout_ms: 1000,
            retry: RetryConfig::default(),
        };
        assert!(WebhookSink::build(&config, Duration::from_secs(1)).is_err());
    }
}
