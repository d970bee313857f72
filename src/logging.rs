//! Logs go to a file, never to the terminal the console owns.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

/// Starts logging to `path` (appending); `EFFECTWATCH_LOG` sets the filter.
pub fn to_file(path: &Path) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|error| format!("cannot create {}: {error}", parent.display()))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|error| format!("cannot open log file {}: {error}", path.display()))?;
    let filter =
        EnvFilter::try_from_env("EFFECTWATCH_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(Mutex::new(file))
        .try_init()
        .map_err(|error| format!("cannot start logging: {error}"))
}

/// A service's warnings go to stderr, where its supervisor collects them
/// (the gateway's stdout may be its MCP transport); `EFFECTWATCH_LOG` sets
/// the filter, `warn` by default.
pub fn warnings_to_stderr() {
    let filter =
        EnvFilter::try_from_env("EFFECTWATCH_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}
