//! A provider wrapped by an external program, so any provider's CLI can
//! be used. The program gets one JSON object on stdin and prints one on
//! stdout; a non-zero exit or no answer within the timeout means the
//! provider could not tell.
//!
//! stdin:  `{"operation": "lookup" | "compensate", "effect": {op_key, action,
//!          target, params, amount_minor, currency, external_ref, provider},
//!          "compensation_key": "...", "reason": "..."}` (the last two for
//!          compensate only)
//! stdout: `{"effects": [{"id": "...", "status": "succeeded" | "failed" | "pending",
//!          "amount_minor": 1500, "currency": "EUR", "idempotency_key": "...",
//!          "metadata": {...}}], "error": "...", "evidence": {...}}`
//!
//! For a lookup, `effects` lists what the provider holds for the effect (an
//! empty list: nothing); `error` means the program could not tell. For a
//! compensation, `effects[0]` is the compensation as the provider holds it;
//! `error` with no effects means the provider refused it.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    CompensationAnswer, CompensationOutcome, EVIDENCE_CAP, EffectQuery, Lookup, ProviderEffect,
    ProviderError, bounded, compensation_outcome,
};
use crate::adapters::all_clear;
use crate::adapters::process::{self, Finished};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandProviderConfig {
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default = "default_command_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_command_timeout_ms() -> u64 {
    10_000
}

#[derive(Debug, Clone)]
pub struct CommandProvider {
    name: String,
    config: CommandProviderConfig,
    timeout: Duration,
}

#[derive(Debug, Deserialize)]
struct CommandAnswer {
    #[serde(default)]
    effects: Vec<ProviderEffect>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    evidence: Option<Value>,
}

/// Everything wrong with a command provider's configuration, one line each.
pub fn problems(config: &CommandProviderConfig) -> Vec<String> {
    let mut problems = Vec::new();
    if config.program.trim().is_empty() {
        problems.push("program is empty".to_string());
    }
    if config.timeout_ms == 0 {
        problems.push("timeout_ms must be above 0".to_string());
    }
    problems
}

impl CommandProvider {
    pub fn build(
        name: &str,
        config: &CommandProviderConfig,
    ) -> Result<CommandProvider, ProviderError> {
        all_clear(problems(config))
            .map_err(|message| ProviderError::Config(format!("provider {name}: {message}")))?;
        Ok(CommandProvider {
            name: name.to_string(),
            config: config.clone(),
            timeout: Duration::from_millis(config.timeout_ms),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn ask(&self, input: &[u8]) -> Result<(CommandAnswer, Value), ProviderError> {
        let finished: Finished = process::run(
            &self.config.program,
            &self.config.args,
            &[("EFFECTWATCH_PROVIDER", &self.name)],
            input,
            self.timeout,
        )
        .await
        .map_err(|error| ProviderError::Command(error.to_string()))?;
        if !finished.success {
            return Err(ProviderError::Command(format!(
                "{} ended with {}: {}",
                self.config.program,
                finished.status_text(),
                finished.stderr_line()
            )));
        }
        let raw: Value = serde_json::from_slice(&finished.stdout).map_err(|error| {
            ProviderError::Unparseable(format!("{} printed no JSON: {error}", self.config.program))
        })?;
        let answer: CommandAnswer = serde_json::from_value(raw.clone()).map_err(|error| {
            ProviderError::Unparseable(format!(
                "{} printed JSON outside the documented schema: {error}",
                self.config.program
            ))
        })?;
        Ok((answer, raw))
    }

    fn evidence(&self, operation: &str, answer: &CommandAnswer, raw: Value) -> Value {
        json!({
            "provider": self.name,
            "program": self.config.program,
            "operation": operation,
            "answer": bounded(answer.evidence.clone().unwrap_or(raw), EVIDENCE_CAP),
        })
    }

    pub async fn lookup(&self, query: &EffectQuery) -> Result<Lookup, ProviderError> {
        let input = json!({ "operation": "lookup", "effect": query });
        let (answer, raw) = self.ask(input.to_string().as_bytes()).await?;
        if let Some(error) = &answer.error {
            return Err(ProviderError::Command(format!(
                "{} could not tell: {}",
                self.config.program,
                crate::text::sanitize_line(error)
            )));
        }
        let evidence = self.evidence("lookup", &answer, raw);
        Ok(Lookup {
            effects: answer.effects,
            evidence,
        })
    }

    pub fn prepare_compensation(
        &self,
        original: &EffectQuery,
        compensation_key: &str,
        reason: &str,
    ) -> Result<Vec<u8>, ProviderError> {
        Ok(json!({
            "operation": "compensate",
            "effect": original,
            "compensation_key": compensation_key,
            "reason": reason,
        })
        .to_string()
        .into_bytes())
    }

    pub async fn compensate(&self, input: Vec<u8>) -> CompensationAnswer {
        match self.ask(&input).await {
            Err(error) => CompensationAnswer {
                outcome: CompensationOutcome::Unknown {
                    reason: error.to_string(),
                },
                evidence: error.evidence(&self.name),
            },
            Ok((answer, raw)) => {
                let outcome = match (answer.effects.first(), &answer.error) {
                    (Some(effect), _) => compensation_outcome(effect),
                    (None, Some(error)) => CompensationOutcome::Failed {
                        reason: format!("refused: {}", crate::text::sanitize_line(error)),
                        retryable: false,
                    },
                    (None, None) => CompensationOutcome::Unknown {
                        reason: "the program answered without an effect".into(),
                    },
                };
                CompensationAnswer {
                    outcome,
                    evidence: self.evidence("compensate", &answer, raw),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::provider::ProviderStatus;

    fn provider(script: &str, timeout_ms: u64) -> CommandProvider {
        CommandProvider::build(
            "cli",
            &CommandProviderConfig {
                program: "/bin/sh".into(),
                args: vec!["-c".into(), script.into()],
                timeout_ms,
            },
        )
        .unwrap()
    }

    fn query() -> EffectQuery {
        EffectQuery {
            op_key: "refund:1".into(),
            action: "refund".into(),
            target: "invoice:1".into(),
            params: json!({}),
            amount_minor: Some(100),
            currency: Some("EUR".into()),
            external_ref: None,
            provider: Some("cli".into()),
        }
    }

    #[tokio::test]
    async fn lookup_reads_the_documented_schema() {
        let script = r#"cat >/dev/null; echo '{"effects":[{"id":"r1","status":"succeeded","amount_minor":100,"currency":"EUR"}]}'"#;
        let lookup = provider(script, 5000).lookup(&query()).await.unwrap();
        assert_eq!(lookup.effects.len(), 1);
        assert_eq!(lookup.effects[0].status, ProviderStatus::Succeeded);
        assert_eq!(lookup.evidence["operation"], "lookup");
    }

    #[tokio::test]
    async fn failures_are_indeterminate_not_absent() {
        let error = provider("echo boom >&2; exit 2", 5000)
            .lookup(&query())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("boom"), "{error}");
        let error = provider("echo not json", 5000)
            .lookup(&query())
            .await
            .unwrap_err();
        assert!(matches!(error, ProviderError::Unparseable(_)));
        let error = provider("sleep 20", 200)
            .lookup(&query())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("200 ms"), "{error}");
        let error = provider(r#"echo '{"error":"api down"}'"#, 5000)
            .lookup(&query())
            .await
            .unwrap_err();
        assert!(!error.is_config());
    }

    #[tokio::test]
    async fn compensation_sees_its_key_on_stdin() {
        let script = r#"key=$(sed -n 's/.*"compensation_key":"\([^"]*\)".*/\1/p'); echo "{\"effects\":[{\"id\":\"$key\",\"status\":\"succeeded\"}]}""#;
        let provider = provider(script, 5000);
        let input = provider
            .prepare_compensation(&query(), "compensate:refund:1:1", "why")
            .unwrap();
        let answer = provider.compensate(input).await;
        assert_eq!(
            answer.outcome,
            CompensationOutcome::Succeeded {
                external_ref: "compensate:refund:1:1".into()
            }
        );
    }
}
