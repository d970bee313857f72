//! A desktop notification (D-Bus, through notify-rust). Without a session
//! bus it fails within a millisecond; the call is bounded anyway, since a
//! bus without a notification daemon may take its time to say so.

use serde::Deserialize;
use serde_json::Value;

use super::{SinkError, summary_line};
use crate::adapters::RetryConfig;
use crate::text::truncate;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesktopConfig {
    #[serde(default = "default_desktop_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub retry: RetryConfig,
}

fn default_desktop_timeout_ms() -> u64 {
    2_000
}

#[derive(Debug, Clone)]
pub struct DesktopSink;

impl DesktopSink {
    pub fn build(_config: &DesktopConfig) -> DesktopSink {
        DesktopSink
    }

    /// The caller bounds this with the sink's timeout.
    pub async fn deliver(&self, payload: &Value) -> Result<(), SinkError> {
        let body = truncate(&summary_line(payload), 300);
        notify_rust::Notification::new()
            .appname("effectwatch")
            .summary("effectwatch: decision needed")
            .body(&body)
            .show_async()
            .await
            .map(|_| ())
            .map_err(|error| {
                SinkError::Failed(format!(
                    "desktop notification failed: {}",
                    crate::text::sanitize_line(&error.to_string())
                ))
            })
    }
}
