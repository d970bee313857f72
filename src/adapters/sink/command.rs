//! An external program receives the escalation as JSON on stdin (and its
//! key in EFFECTWATCH_ESCALATION_KEY); exit status 0 means delivered.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::SinkError;
use crate::adapters::{RetryConfig, all_clear, default_timeout_ms, process};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandSinkConfig {
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub retry: RetryConfig,
}

#[derive(Debug, Clone)]
pub struct CommandSink {
    config: CommandSinkConfig,
}

/// Everything wrong with a command sink's configuration, one line each.
pub fn problems(config: &CommandSinkConfig) -> Vec<String> {
    if config.program.trim().is_empty() {
        vec!["program is empty".to_string()]
    } else {
        Vec::new()
    }
}

impl CommandSink {
    pub fn build(config: &CommandSinkConfig) -> Result<CommandSink, String> {
        all_clear(problems(config))?;
        Ok(CommandSink {
            config: config.clone(),
        })
    }

    pub async fn deliver(
        &self,
        escalation_key: &str,
        payload: &Value,
        timeout: Duration,
    ) -> Result<(), SinkError> {
        let input = payload.to_string();
        let finished = process::run(
            &self.config.program,
            &self.config.args,
            &[("EFFECTWATCH_ESCALATION_KEY", escalation_key)],
            input.as_bytes(),
            timeout,
        )
        .await
        .map_err(|error| SinkError::Failed(error.to_string()))?;
        if finished.success {
            Ok(())
        } else {
            Err(SinkError::Failed(format!(
                "{} ended with {}: {}",
                self.config.program,
                finished.status_text(),
                finished.stderr_line()
            )))
        }
    }
}
