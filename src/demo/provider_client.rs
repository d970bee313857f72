//! How the simulated agents call the demo's provider: real HTTP, with the
//! operation key as the idempotency key, as a well-behaved agent does.

use std::time::Duration;

use serde_json::{Value, json};

use crate::ledger::writer::Intent;

#[derive(Clone)]
pub struct ProviderClient {
    http: reqwest::Client,
    base_url: String,
}

impl ProviderClient {
    pub fn new(base_url: String) -> Result<ProviderClient, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .build()
            .map_err(|error| format!("cannot build the HTTP client: {error}"))?;
        Ok(ProviderClient { http, base_url })
    }

    /// Performs the effect at the provider; returns its reference.
    pub async fn create(&self, intent: &Intent) -> Result<String, String> {
        let body = json!({
            "kind": intent.action,
            "amount_minor": intent.amount_minor,
            "currency": intent.currency,
            "target": intent.target,
            "metadata": { "op_key": intent.op_key, "params": intent.params },
        });
        let response = self
            .http
            .post(format!("{}/v1/effects", self.base_url))
            .header("Idempotency-Key", &intent.op_key)
            .json(&body)
            .send()
            .await
            .map_err(|error| format!("provider call failed: {error}"))?;
        let status = response.status();
        let answer: Value = response
            .json()
            .await
            .map_err(|error| format!("provider answer unreadable: {error}"))?;
        if !status.is_success() {
            return Err(format!("provider answered HTTP {}", status.as_u16()));
        }
        answer
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| "provider answer has no id".to_string())
    }
}
