use super::exit::Failure;
use crate::adapters::secrets::redact_url;
use crate::config::{Config, ConfigError, ConfigSource};

pub async fn run(
    config: &Config,
    source: &ConfigSource,
    database_url: Option<&str>,
) -> Result<(), Failure> {
    match source {
        ConfigSource::File(path) => println!("config file:      {}", path.display()),
        ConfigSource::Defaults(Some(path)) => println!(
            "config file:      {} (absent: built-in defaults)",
            path.display()
        ),
        ConfigSource::Defaults(None) => {
            println!("config file:      none (no config dir on this platform)")
        }
    }
    println!("log file:         {}", config.log_path().display());
    let url = database_url
        .or(config.database_url.as_deref())
        .map(redact_url)
        .unwrap_or_else(|| "(not set)".into());
    println!("database_url:     {url}");
    println!(
        "read_url:         {}",
        config
            .read_url
            .as_deref()
            .map(redact_url)
            .unwrap_or_else(|| "(not set: reads go to database_url)".into())
    );
    println!("operator:         {}", config.operator);
    println!("poll interval:    {} s", config.poll_interval_secs);
    println!("statement timeout: {} s", config.statement_timeout_secs);
    println!("theme:            {}", config.theme);
    println!("read_only:        {}", config.read_only);
    println!(
        "notifications:    {} (at most one per pane every {} s)",
        if config.notifications.enabled {
            "on"
        } else {
            "off"
        },
        config.notifications.min_interval_secs
    );
    let providers: Vec<&String> = config.providers.keys().collect();
    let sinks: Vec<&String> = config.sinks.keys().collect();
    println!(
        "providers:        {}",
        if providers.is_empty() {
            "none".into()
        } else {
            format!("{providers:?}")
        }
    );
    println!(
        "sinks:            {}",
        if sinks.is_empty() {
            "none".into()
        } else {
            format!("{sinks:?}")
        }
    );
    let reconciler = &config.reconciler;
    println!(
        "reconciler:       {} every {} s, after {} s unknown; lease {} s, batch {}, {} at once; \
         backoff {}–{} s; a person after {} tries{}",
        reconciler.name.as_deref().unwrap_or("reconciler@<host>"),
        reconciler.interval_secs,
        reconciler.grace_secs,
        reconciler.lease_secs,
        reconciler.batch,
        reconciler.concurrency,
        reconciler.backoff_secs,
        reconciler.backoff_max_secs,
        reconciler.escalate_after,
        reconciler
            .metrics_address
            .as_deref()
            .map(|address| format!("; metrics on {address}"))
            .unwrap_or_default()
    );
    println!(
        "audit signing:    {}; {} trusted key(s)",
        config
            .audit
            .signing_key
            .as_deref()
            .map(|path| format!("checkpoints signed with {}", path.display()))
            .unwrap_or_else(|| "no signing key (retention cannot drop audit history)".into()),
        config.audit.trusted_keys.len()
    );
    let url = database_url.or(config.database_url.as_deref());
    println!("durability:       {}", durability(config, url).await);
    Ok(())
}

/// Whether acknowledged writes survive a failover, asked of the ledger's
/// server briefly; what stops the asking is said instead.
async fn durability(config: &Config, url: Option<&str>) -> String {
    let Some(url) = url else {
        return "cannot tell (no database_url)".into();
    };
    let mut settings = config.connect_settings(url.to_string(), "config");
    settings.connect_timeout = std::time::Duration::from_secs(3);
    settings.max_connections = 1;
    let measured = async {
        let pool = crate::ledger::connect(&settings).await?;
        let mut tx = crate::ledger::snapshot::begin(&pool).await?;
        let durability = crate::ledger::durability::measure(&mut tx).await;
        drop(tx);
        pool.close().await;
        durability
    };
    match measured.await {
        Ok(durability) => durability.verdict().said(),
        Err(error) => format!(
            "cannot tell: {}",
            crate::text::sanitize_line(&error.to_string())
        ),
    }
}

/// A config that cannot be used: the file and every problem, one per line.
pub fn print_problems(error: &ConfigError) {
    let problems = error.problems();
    println!("config file:      {}", error.path().display());
    println!(
        "problems:         {} (nothing runs until they are fixed)",
        problems.len()
    );
    for problem in problems {
        println!("  {}", crate::text::sanitize_line(&problem));
    }
}
