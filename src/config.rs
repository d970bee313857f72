//! The config file: TOML, every field optional, defaults built in. Read from
//! `--config`, else the platform config dir (`effectwatch/config.toml`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::adapters::{ProviderConfig, SinkConfig};
use crate::text::one_line_toml_error;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// Parsed, but settings, providers or sinks that cannot work.
    #[error("config {path}: {}", summary(.problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<String>,
    },
}

impl ConfigError {
    /// Each problem on its own, for a list.
    pub fn problems(&self) -> Vec<String> {
        match self {
            ConfigError::Read { message, .. } => vec![format!("cannot read it: {message}")],
            ConfigError::Parse { message, .. } => vec![message.clone()],
            ConfigError::Invalid { problems, .. } => problems.clone(),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            ConfigError::Read { path, .. }
            | ConfigError::Parse { path, .. }
            | ConfigError::Invalid { path, .. } => path,
        }
    }
}

/// Problems on one line: the problem itself, or `N problems: a; b`.
fn summary(problems: &[String]) -> String {
    match problems {
        [one] => one.clone(),
        many => format!("{} problems: {}", many.len(), many.join("; ")),
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub database_url: Option<String>,
    /// A streaming replica for what only reads (the console's panes and
    /// detail, list, show, finance, report, audit list); actions and the
    /// writer go to `database_url`.
    pub read_url: Option<String>,
    /// Replay lag above which a console on the replica calls its data stale.
    pub replica_lag_stale_secs: f64,
    /// Who the audit trail says acted; defaults to the OS user.
    pub operator: String,
    pub poll_interval_secs: f64,
    pub statement_timeout_secs: u64,
    pub theme: String,
    pub read_only: bool,
    pub mouse: bool,
    pub notifications: NotificationConfig,
    pub providers: BTreeMap<String, ProviderConfig>,
    pub sinks: BTreeMap<String, SinkConfig>,
    /// Where logs go; never the terminal the console owns.
    pub log_file: Option<PathBuf>,
    pub reconciler: ReconcilerConfig,
    pub audit: AuditConfig,
}

/// `[audit]`: the key that signs the audit chain's checkpoints when
/// retention drops months of it, and the keys `audit verify` trusts.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// A file made by `effectwatch audit keygen` (never stored in the ledger).
    pub signing_key: Option<PathBuf>,
    /// Public keys (base64, as keygen prints them) whose checkpoints verify.
    pub trusted_keys: Vec<String>,
}

/// `[reconciler]`: how `effectwatch reconcile --watch` and `--once` work.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcilerConfig {
    /// The operator name in the audit trail; default `reconciler@<host>`.
    pub name: Option<String>,
    pub interval_secs: f64,
    /// Longer than one effect's pass can take (provider timeout included).
    pub lease_secs: u64,
    /// An unknown effect (or a dispatched pending one past its window)
    /// waits this long for its agent's late answer before the provider is asked.
    pub grace_secs: u64,
    pub batch: i64,
    pub concurrency: usize,
    pub backoff_secs: f64,
    pub backoff_max_secs: f64,
    /// Passes that leave an effect open before a person is asked.
    pub escalate_after: i32,
    /// The sink escalations go to; default: the only one configured.
    pub sink: Option<String>,
    /// Where `/metrics` and `/healthz` are served, e.g. "127.0.0.1:9187".
    pub metrics_address: Option<String>,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig {
            name: None,
            interval_secs: 10.0,
            lease_secs: 120,
            grace_secs: 60,
            batch: 50,
            concurrency: 4,
            backoff_secs: 30.0,
            backoff_max_secs: 3600.0,
            escalate_after: 5,
            sink: None,
            metrics_address: None,
        }
    }
}

impl ReconcilerConfig {
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !(0.05..=3600.0).contains(&self.interval_secs) {
            problems.push("reconciler.interval_secs must be between 0.05 and 3600".to_string());
        }
        if self.lease_secs == 0 {
            problems.push("reconciler.lease_secs must be at least 1".to_string());
        }
        if !(1..=10_000).contains(&self.batch) {
            problems.push("reconciler.batch must be between 1 and 10000".to_string());
        }
        if !(1..=64).contains(&self.concurrency) {
            problems.push("reconciler.concurrency must be between 1 and 64".to_string());
        }
        if !(self.backoff_secs > 0.0 && self.backoff_max_secs >= self.backoff_secs) {
            problems.push(
                "reconciler.backoff_secs must be positive and at most backoff_max_secs".to_string(),
            );
        }
        if self.escalate_after < 1 {
            problems.push("reconciler.escalate_after must be at least 1".to_string());
        }
        if let Some(address) = &self.metrics_address
            && address.parse::<std::net::SocketAddr>().is_err()
        {
            problems.push(format!(
                "reconciler.metrics_address must be host:port with an IP address (got {address:?})"
            ));
        }
        problems
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotificationConfig {
    pub enabled: bool,
    /// At most one notification per pane within this many seconds.
    pub min_interval_secs: u64,
    pub timeout_ms: u64,
}

impl Default for NotificationConfig {
    fn default() -> Self {
        NotificationConfig {
            enabled: true,
            min_interval_secs: 30,
            timeout_ms: 2000,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: None,
            read_url: None,
            replica_lag_stale_secs: 30.0,
            operator: whoami::username().unwrap_or_else(|_| "operator".to_string()),
            poll_interval_secs: 2.0,
            statement_timeout_secs: 10,
            theme: "dark".to_string(),
            read_only: false,
            mouse: false,
            notifications: NotificationConfig::default(),
            providers: BTreeMap::new(),
            sinks: BTreeMap::new(),
            log_file: None,
            reconciler: ReconcilerConfig::default(),
            audit: AuditConfig::default(),
        }
    }
}

/// Where the settings came from, for `effectwatch config`.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigSource {
    File(PathBuf),
    /// The default path, which does not exist: built-in defaults apply.
    Defaults(Option<PathBuf>),
}

impl Config {
    /// How this process connects for `part` (console, poller, settle, demo…):
    /// the configured statement timeout on every pool, and a name a DBA can
    /// tell apart in pg_stat_activity (`effectwatch:alice:poller`).
    pub fn connect_settings(
        &self,
        url: impl Into<String>,
        part: &str,
    ) -> crate::ledger::ConnectSettings {
        let mut settings = crate::ledger::ConnectSettings::new(url);
        settings.statement_timeout = std::time::Duration::from_secs(self.statement_timeout_secs);
        settings.application_name = application_name(&self.operator, part);
        settings
    }

    pub fn default_path() -> Option<PathBuf> {
        directories::ProjectDirs::from("", "", "effectwatch")
            .map(|dirs| dirs.config_dir().join("config.toml"))
    }

    pub fn default_log_path() -> PathBuf {
        directories::ProjectDirs::from("", "", "effectwatch")
            .map(|dirs| dirs.cache_dir().join("effectwatch.log"))
            .unwrap_or_else(|| std::env::temp_dir().join("effectwatch.log"))
    }

    /// An explicit path must exist; the default path may be absent. What
    /// the file says is checked, then whether it works on this machine
    /// (`environment_problems`): every command starts on a config it can
    /// run on, or not at all. `theme_problem` says why a theme would not
    /// load: the console's to judge, so the config depends on no console.
    pub fn load(
        explicit: Option<&Path>,
        theme_problem: impl Fn(&str) -> Option<String>,
    ) -> Result<(Config, ConfigSource), ConfigError> {
        let path = match explicit {
            Some(path) => path.to_path_buf(),
            None => match Self::default_path() {
                Some(path) if path.exists() => path,
                other => return Ok((Config::default(), ConfigSource::Defaults(other))),
            },
        };
        let config = Self::from_file(&path)?;
        match config.environment_problems(theme_problem) {
            problems if problems.is_empty() => Ok((config, ConfigSource::File(path))),
            problems => Err(ConfigError::Invalid { path, problems }),
        }
    }

    /// Reads and checks a file: every problem is found now, before any
    /// command runs, not when a provider or sink is first used.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            message: error.to_string(),
        })?;
        let config: Config = toml::from_str(&text).map_err(|error| ConfigError::Parse {
            path: path.to_path_buf(),
            message: one_line_toml_error(&text, &error),
        })?;
        match config.problems() {
            problems if problems.is_empty() => Ok(config),
            problems => Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                problems,
            }),
        }
    }

    /// Parses and checks TOML; the error is one line naming the line,
    /// column and field, or every problem found.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let config: Config =
            toml::from_str(text).map_err(|error| one_line_toml_error(text, &error))?;
        match config.problems() {
            problems if problems.is_empty() => Ok(config),
            problems => Err(summary(&problems)),
        }
    }

    /// Everything that keeps this config from working, one line each:
    /// settings out of range, and every provider and sink checked as it
    /// would be built (without a database, a network or the environment:
    /// a variable named by `{ env = "…" }` is read when a request is made).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !(0.1..=3600.0).contains(&self.poll_interval_secs) {
            problems.push(format!(
                "poll_interval_secs must be between 0.1 and 3600 (got {})",
                self.poll_interval_secs
            ));
        }
        // PostgreSQL takes the timeout in milliseconds as a 32-bit integer;
        // 0 would remove the bound altogether.
        if !(1..=2_147_483).contains(&self.statement_timeout_secs) {
            problems.push(format!(
                "statement_timeout_secs must be between 1 and 2147483 (got {}): 0 would let a statement run forever",
                self.statement_timeout_secs
            ));
        }
        if !(self.replica_lag_stale_secs >= 0.0 && self.replica_lag_stale_secs.is_finite()) {
            problems.push(format!(
                "replica_lag_stale_secs must be 0 or more (got {})",
                self.replica_lag_stale_secs
            ));
        }
        if self.operator.trim().is_empty() {
            problems.push("operator must not be empty".to_string());
        }
        problems.extend(self.reconciler.problems());
        for key in &self.audit.trusted_keys {
            if !crate::ledger::audit::is_public_key(key) {
                problems.push(format!(
                    "audit.trusted_keys: {} is not a public key (base64 of 32 bytes, as `effectwatch audit keygen` prints)",
                    crate::text::sanitize_line(key)
                ));
            }
        }
        problems.extend(adapter_problems(&self.providers, &self.sinks));
        problems
    }

    /// What keeps this config from working on this machine, one line
    /// each: a theme that does not load, a log file that cannot be
    /// written, a secret's environment variable that is not set. Checked
    /// when a command starts; a secret is still read again when a request
    /// is made, so a rotated one is picked up.
    pub fn environment_problems(
        &self,
        theme_problem: impl Fn(&str) -> Option<String>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        problems.extend(theme_problem(&self.theme));
        if let Some(path) = &self.log_file
            && let Err(error) = can_append_to(path)
        {
            problems.push(format!(
                "cannot write the log file {}: {error}",
                path.display()
            ));
        }
        for (owner, (variable, what)) in self.secret_variables() {
            if !std::env::var(&variable).is_ok_and(|value| !value.is_empty()) {
                problems.push(format!(
                    "{owner}: environment variable {variable} (for {what}) is not set"
                ));
            }
        }
        problems
    }

    /// Every environment variable a provider or sink takes a secret from:
    /// (`provider NAME` or `sink NAME`, (variable, what it is for)).
    fn secret_variables(&self) -> impl Iterator<Item = (String, (String, String))> + '_ {
        let providers = self.providers.iter().flat_map(|(name, provider)| {
            provider
                .secret_variables()
                .into_iter()
                .map(move |variable| (format!("provider {name}"), variable))
        });
        let sinks = self.sinks.iter().flat_map(|(name, sink)| {
            sink.secret_variables()
                .into_iter()
                .map(move |variable| (format!("sink {name}"), variable))
        });
        providers.chain(sinks)
    }

    /// The secrets the providers and sinks take from the environment, as
    /// set now: masked in whatever a provider or sink sends back before
    /// the ledger stores it.
    pub fn secret_redactor(&self) -> crate::adapters::secrets::Redactor {
        crate::adapters::secrets::Redactor::new(
            self.secret_variables()
                .filter_map(|(_, (variable, _))| std::env::var(variable).ok()),
        )
    }

    /// Adds the providers and sinks of a TOML fragment (the demo wires its
    /// own fake provider this way); names already configured are kept.
    /// The fragment is checked as a file is.
    pub fn merge_toml(&mut self, fragment: &str) -> Result<(), String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Adapters {
            #[serde(default)]
            providers: BTreeMap<String, ProviderConfig>,
            #[serde(default)]
            sinks: BTreeMap<String, SinkConfig>,
        }
        let adapters: Adapters =
            toml::from_str(fragment).map_err(|error| one_line_toml_error(fragment, &error))?;
        let problems = adapter_problems(&adapters.providers, &adapters.sinks);
        if !problems.is_empty() {
            return Err(summary(&problems));
        }
        for (name, provider) in adapters.providers {
            self.providers.entry(name).or_insert(provider);
        }
        for (name, sink) in adapters.sinks {
            self.sinks.entry(name).or_insert(sink);
        }
        Ok(())
    }

    pub fn poll_interval(&self) -> Duration {
        Duration::from_secs_f64(self.poll_interval_secs)
    }

    pub fn log_path(&self) -> PathBuf {
        self.log_file.clone().unwrap_or_else(Self::default_log_path)
    }
}

/// Opens the file for appending, as logging will, making its folder if
/// needed; nothing is written.
fn can_append_to(path: &Path) -> std::io::Result<()> {
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(drop)
}

fn adapter_problems(
    providers: &BTreeMap<String, ProviderConfig>,
    sinks: &BTreeMap<String, SinkConfig>,
) -> Vec<String> {
    let providers = providers.iter().flat_map(|(name, provider)| {
        provider
            .problems()
            .into_iter()
            .map(move |problem| format!("provider {name}: {problem}"))
    });
    let sinks = sinks.iter().flat_map(|(name, sink)| {
        sink.problems()
            .into_iter()
            .map(move |problem| format!("sink {name}: {problem}"))
    });
    providers.chain(sinks).collect()
}

/// `effectwatch:<operator>:<part>` in printable ASCII (the server replaces anything
/// else with `?`), within the 63 bytes PostgreSQL keeps.
fn application_name(operator: &str, part: &str) -> String {
    let clean = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect()
    };
    let part = clean(part);
    let room = 63usize.saturating_sub("effectwatch:".len() + part.len() + 1);
    let operator: String = clean(operator).chars().take(room).collect();
    format!("effectwatch:{operator}:{part}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_config_keeps_defaults() {
        let config =
            Config::from_toml("theme = \"light\"\n[notifications]\nenabled = false\n").unwrap();
        assert_eq!(config.theme, "light");
        assert!(!config.notifications.enabled);
        assert_eq!(config.notifications.min_interval_secs, 30);
        assert_eq!(config.poll_interval_secs, 2.0);
    }

    #[test]
    fn malformed_config_names_line_and_field() {
        let error =
            Config::from_toml("theme = \"dark\"\npoll_interval_secs = \"fast\"\n").unwrap_err();
        assert!(error.starts_with("line 2,"), "{error}");
        assert!(!error.contains('\n'));
        let error = Config::from_toml("colour = 1\n").unwrap_err();
        assert!(error.contains("colour"), "{error}");
    }

    fn provider(extra: &str) -> String {
        let lookup = "[[providers.pay.lookup]]\npath = \"/v1/effects\"\nquery = { idempotency_key = \"{key}\" }\n";
        format!(
            "[providers.pay]\nkind = \"http\"\nbase_url = \"http://127.0.0.1:9\"\n{extra}\n{lookup}"
        )
    }

    #[test]
    fn every_provider_and_sink_problem_is_found_on_load() {
        let text = format!(
            "{}\n[[providers.pay.lookup]]\npath = \"/v1/{{nosuch}}\"\n\
             [sinks.ops]\nkind = \"webhook\"\n\
             [sinks.pd]\nkind = \"pagerduty\"\nrouting_key_env = \"PD\"\nseverity = \"panic\"\n",
            provider("headers.Authorization = \"Bearer abc\"")
        );
        let error = Config::from_toml(&text).unwrap_err();
        assert!(error.starts_with("4 problems: "), "{error}");
        for needle in [
            "provider pay: header Authorization looks like a credential",
            "provider pay: lookup[1]: unknown placeholder {nosuch}",
            "sink ops: set exactly one of url and url_env",
            "sink pd: severity \"panic\"",
        ] {
            assert!(error.contains(needle), "{needle}: {error}");
        }
        assert!(!error.contains("Bearer abc"), "{error}");
    }

    #[test]
    fn variables_are_read_when_a_request_is_made_not_on_load() {
        let text = provider(
            "headers.Authorization = { env = \"EFFECTWATCH_TEST_SURELY_UNSET\", prefix = \"Bearer \" }",
        );
        assert!(Config::from_toml(&text).is_ok());
    }

    #[test]
    fn connections_are_named_by_operator_and_part_within_63_bytes() {
        let config = Config {
            operator: "alice".into(),
            ..Config::default()
        };
        let settings = config.connect_settings("postgres://db/ledger", "poller");
        assert_eq!(settings.application_name, "effectwatch:alice:poller");
        assert_eq!(
            settings.statement_timeout.as_secs(),
            config.statement_timeout_secs
        );
        let long = application_name(&"ö\u{1b}".repeat(40), "settle");
        assert!(long.len() <= 63, "{long}");
        assert!(long.is_ascii() && !long.contains('\u{1b}'), "{long}");
        assert!(long.ends_with(":settle"), "{long}");
    }

    #[test]
    fn credentials_written_in_urls_are_refused_on_load() {
        let text = "[providers.pay]\nkind = \"http\"\n\
                    base_url = \"http://user:SUPERSECRET6@127.0.0.1:18080\"\n";
        let error = Config::from_toml(text).unwrap_err();
        assert!(error.contains("provider pay: base_url"), "{error}");
        assert!(error.contains("user:password@"), "{error}");
        assert!(!error.contains("SUPERSECRET6"), "{error}");

        for (query, refused) in [
            ("{ token = \"abc\" }", true),
            ("{ api_key = \"abc\", sig = \"s\" }", true),
            ("{ client_secret = \"x{key}\" }", true),
            ("{ idempotency_key = \"literal\" }", false),
            ("{ api_key = \"{params.api_key}\" }", false),
            ("{ api_key = { env = \"PAY_KEY\" } }", false),
        ] {
            let text = format!(
                "{}[providers.pay.compensate]\npath = \"/v1/refunds\"\nquery = {query}\n",
                provider("")
            );
            let result = Config::from_toml(&text);
            assert_eq!(result.is_err(), refused, "{query}: {result:?}");
            if let Err(error) = result {
                assert!(error.contains("looks like a credential"), "{error}");
                assert!(error.contains("env = "), "{error}");
            }
        }
        let text = format!(
            "{}[providers.pay.compensate]\npath = \"/v1/refunds?access_token=abc\"\n",
            provider("")
        );
        assert!(Config::from_toml(&text).is_err());

        for sink in [
            "kind = \"webhook\"\nurl = \"https://hooks.example/x?token=abc\"",
            "kind = \"webhook\"\nurl = \"https://bot:pw@hooks.example/x\"",
            "kind = \"pagerduty\"\nrouting_key_env = \"PD\"\nurl = \"https://u:pw@events.example/v2\"",
        ] {
            let error = Config::from_toml(&format!("[sinks.ops]\n{sink}\n")).unwrap_err();
            assert!(error.starts_with("sink ops: url: "), "{error}");
            assert!(!error.contains("pw@") && !error.contains("abc"), "{error}");
        }
    }

    #[test]
    fn merged_fragments_are_checked_too() {
        let mut config = Config::default();
        let error = config
            .merge_toml(&provider("headers.X-Api-Key = \"abc\""))
            .unwrap_err();
        assert!(error.contains("X-Api-Key"), "{error}");
        assert!(config.providers.is_empty());
        config.merge_toml(&provider("")).unwrap();
        assert!(config.providers.contains_key("pay"));
    }

    #[test]
    fn the_demo_config_is_valid() {
        let fragment = crate::demo::demo_adapters_toml("http://127.0.0.1:9");
        Config::default().merge_toml(&fragment).unwrap();
        Config::from_toml(&fragment).unwrap();
    }

    #[test]
    fn a_file_names_itself_and_each_problem() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            file.path(),
            "poll_interval_secs = 0.0\n[sinks.ops]\nkind = \"command\"\nprogram = \"\"\n",
        )
        .unwrap();
        let error = Config::from_file(file.path()).unwrap_err();
        assert_eq!(error.problems().len(), 2, "{error}");
        assert_eq!(error.path(), file.path());
        let line = error.to_string();
        assert!(
            line.starts_with(&format!("config {}: 2 problems: ", file.path().display())),
            "{line}"
        );
        assert!(line.contains("sink ops: program is empty"), "{line}");
    }
}
