//! Providers: where an effect really happened. Two questions are asked of
//! them — "what do you hold for this effect?" (lookup, for reconciliation)
//! and "reverse it, under this key" (compensation) — through HTTP requests
//! built from templates, or an external command speaking JSON.

pub mod command;
pub mod http;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use thiserror::Error;

use super::ProviderConfig;
use super::http_call::CallError;
use super::template::Vars;
use crate::ledger::Effect;

/// What a provider is asked about: the ledger's view of one effect.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EffectQuery {
    pub op_key: String,
    pub action: String,
    pub target: String,
    pub params: Value,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub external_ref: Option<String>,
    pub provider: Option<String>,
}

impl From<&Effect> for EffectQuery {
    fn from(effect: &Effect) -> Self {
        EffectQuery {
            op_key: effect.op_key.clone(),
            action: effect.action.clone(),
            target: effect.target.clone(),
            params: effect.params.clone(),
            amount_minor: effect.amount_minor,
            currency: effect.currency.clone(),
            external_ref: effect.external_ref.clone(),
            provider: effect.provider.clone(),
        }
    }
}

impl EffectQuery {
    /// The values request templates may use.
    pub fn vars(&self, compensation_key: Option<&str>) -> Vars {
        let mut vars = Vars::new(self.params.clone());
        vars.set("key", Some(json!(self.op_key)))
            .set("op_key", Some(json!(self.op_key)))
            .set("action", Some(json!(self.action)))
            .set("target", Some(json!(self.target)))
            .set("amount_minor", self.amount_minor.map(|a| json!(a)))
            .set("currency", self.currency.as_ref().map(|c| json!(c)))
            .set("external_ref", self.external_ref.as_ref().map(|r| json!(r)))
            .set("provider", self.provider.as_ref().map(|p| json!(p)))
            .set("compensation_key", compensation_key.map(|k| json!(k)));
        vars
    }
}

/// A provider's own status, folded to what the ledger can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderStatus {
    Succeeded,
    Failed,
    /// Accepted but not final: nothing can be concluded yet.
    Pending,
}

/// One effect as the provider holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderEffect {
    pub id: String,
    pub status: ProviderStatus,
    /// The provider's word for the status, when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_minor: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// What a lookup found, with the part of the answer that shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    pub effects: Vec<ProviderEffect>,
    pub evidence: Value,
}

/// How a compensation request ended, as far as the provider said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompensationOutcome {
    Succeeded {
        external_ref: String,
    },
    Failed {
        reason: String,
        retryable: bool,
    },
    /// No answer, or no final one: reconcile the compensation later.
    Unknown {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompensationAnswer {
    pub outcome: CompensationOutcome,
    pub evidence: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProviderError {
    /// Nothing was sent: the configuration cannot make this request.
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Call(CallError),
    #[error("server error (HTTP {status}){}", excerpt_suffix(.excerpt))]
    Server { status: u16, excerpt: String },
    #[error("request refused (HTTP {status}){}", excerpt_suffix(.excerpt))]
    Refused { status: u16, excerpt: String },
    #[error("unreadable answer: {0}")]
    Unparseable(String),
    #[error("{0}")]
    Command(String),
}

fn excerpt_suffix(excerpt: &str) -> String {
    if excerpt.is_empty() {
        String::new()
    } else {
        format!(": {excerpt}")
    }
}

impl ProviderError {
    /// Configuration problems are the operator's to fix; everything else
    /// means the provider could not tell, so the outcome stays unknown.
    pub fn is_config(&self) -> bool {
        matches!(self, ProviderError::Config(_))
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ProviderError::Config(_) => "config",
            ProviderError::Call(call) => call.kind(),
            ProviderError::Server { .. } => "server_error",
            ProviderError::Refused { .. } => "refused",
            ProviderError::Unparseable(_) => "unparseable",
            ProviderError::Command(_) => "command",
        }
    }

    pub fn evidence(&self, provider: &str) -> Value {
        json!({ "provider": provider, "error": self.kind(), "message": self.to_string() })
    }
}

/// Keeps stored evidence small: a large answer is kept as an excerpt.
pub(crate) fn bounded(value: Value, cap: usize) -> Value {
    let text = value.to_string();
    if text.len() <= cap {
        return value;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({ "truncated": true, "bytes": text.len(), "excerpt": &text[..end] })
}

/// Largest answer kept as evidence, in bytes of JSON.
pub(crate) const EVIDENCE_CAP: usize = 16 * 1024;

/// A compensation request built and checked before the compensation is
/// claimed for dispatch, so a configuration problem never leaves a claimed
/// compensation that was not sent.
pub enum Prepared {
    Http(http::PreparedRequest),
    Command(Vec<u8>),
}

/// One configured provider, ready to call.
#[derive(Debug, Clone)]
pub enum Provider {
    Http(Box<http::HttpProvider>),
    Command(command::CommandProvider),
}

impl Provider {
    pub fn build(name: &str, config: &ProviderConfig) -> Result<Provider, ProviderError> {
        match config {
            ProviderConfig::Http(config) => Ok(Provider::Http(Box::new(
                http::HttpProvider::build(name, config)?,
            ))),
            ProviderConfig::Command(config) => Ok(Provider::Command(
                command::CommandProvider::build(name, config)?,
            )),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Provider::Http(provider) => provider.name(),
            Provider::Command(provider) => provider.name(),
        }
    }

    pub fn timeout(&self) -> Duration {
        match self {
            Provider::Http(provider) => provider.timeout(),
            Provider::Command(provider) => provider.timeout(),
        }
    }

    /// Asks what the provider holds for this effect.
    pub async fn lookup(&self, query: &EffectQuery) -> Result<Lookup, ProviderError> {
        match self {
            Provider::Http(provider) => provider.lookup(query).await,
            Provider::Command(provider) => provider.lookup(query).await,
        }
    }

    pub fn prepare_compensation(
        &self,
        original: &EffectQuery,
        compensation_key: &str,
        reason: &str,
    ) -> Result<Prepared, ProviderError> {
        match self {
            Provider::Http(provider) => provider
                .prepare_compensation(original, compensation_key)
                .map(Prepared::Http),
            Provider::Command(provider) => provider
                .prepare_compensation(original, compensation_key, reason)
                .map(Prepared::Command),
        }
    }

    /// Sends a prepared compensation. Never an error: whatever happens
    /// after sending is an outcome the ledger must record.
    pub async fn compensate(&self, prepared: Prepared) -> CompensationAnswer {
        match (self, prepared) {
            (Provider::Http(provider), Prepared::Http(request)) => {
                provider.compensate(request).await
            }
            (Provider::Command(provider), Prepared::Command(input)) => {
                provider.compensate(input).await
            }
            _ => CompensationAnswer {
                outcome: CompensationOutcome::Failed {
                    reason: "internal: request prepared for another provider, not sent".into(),
                    retryable: true,
                },
                evidence: json!({ "provider": self.name(), "sent": false }),
            },
        }
    }
}

/// Folds a provider effect's status into the outcome of a compensation.
pub(crate) fn compensation_outcome(effect: &ProviderEffect) -> CompensationOutcome {
    let said = effect
        .raw_status
        .clone()
        .unwrap_or_else(|| format!("{:?}", effect.status).to_lowercase());
    match effect.status {
        ProviderStatus::Succeeded => CompensationOutcome::Succeeded {
            external_ref: effect.id.clone(),
        },
        ProviderStatus::Failed => CompensationOutcome::Failed {
            reason: format!("the provider reports {} as {said}", effect.id),
            retryable: false,
        },
        ProviderStatus::Pending => CompensationOutcome::Unknown {
            reason: format!(
                "the provider accepted it as {} but reports {said}: reconcile it later",
                effect.id
            ),
        },
    }
}
