//! `effectwatch --version`: the binary's version and the schema it makes,
//! and how the configured ledger's schema stands against it, so an
//! operator can tell before an upgrade whether `effectwatch migrate` has
//! work to do, or cannot do it.

use std::time::Duration;

use super::exit::Failure;
use crate::config::Config;
use crate::ledger::migrate::{SchemaVersion, Standing, standing};

/// How long `--version` waits for the ledger before saying it cannot tell.
const LEDGER_WAIT: Duration = Duration::from_secs(3);

pub async fn run(database_url: Option<String>, config: &Config) -> Result<(), Failure> {
    println!(
        "{}",
        binary_line(env!("CARGO_PKG_VERSION"), &SchemaVersion::of_binary())
    );
    let Some(url) = database_url else {
        return Ok(());
    };
    let mut settings = config.connect_settings(url, "version");
    settings.connect_timeout = LEDGER_WAIT;
    settings.max_connections = 1;
    let line = match tokio::time::timeout(LEDGER_WAIT * 2, async {
        let pool = crate::ledger::connect(&settings).await?;
        let standing = standing(&pool).await;
        pool.close().await;
        standing
    })
    .await
    {
        Err(_) => "ledger: cannot tell (no answer within 6 s)".to_string(),
        Ok(Err(error)) => format!("ledger: cannot tell ({error})"),
        Ok(Ok(Standing::Missing)) => {
            "ledger: no schema installed (run `effectwatch migrate`)".to_string()
        }
        Ok(Ok(Standing::Same(ledger))) => format!("ledger: schema {ledger}, the same"),
        Ok(Ok(other)) => format!(
            "ledger: {}",
            other.error().map(|e| e.to_string()).unwrap_or_default()
        ),
    };
    println!("{}", crate::text::message_line(&line));
    Ok(())
}

/// The binary's line: its version and schema. A build whose migrations no
/// release holds yet is not the release its package version names, and
/// says so (`0.1.0+dev`).
pub fn binary_line(package: &str, binary: &SchemaVersion) -> String {
    if binary.unreleased.is_empty() {
        format!("effectwatch {package} (ledger schema {binary})")
    } else {
        format!(
            "effectwatch {package}+dev (a development build, not a release: ledger schema {binary})"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_build_of_released_migrations_reads_as_the_release() {
        let release = SchemaVersion::of(&(1..=18).collect::<Vec<_>>());
        assert_eq!(
            binary_line("0.1.0", &release),
            "effectwatch 0.1.0 (ledger schema 1)"
        );
        let development = SchemaVersion::of(&(1..=21).collect::<Vec<_>>());
        assert_eq!(
            binary_line("0.1.0", &development),
            "effectwatch 0.1.0+dev (a development build, not a release: ledger schema 1 + 3 \
             unreleased migrations (0019, 0020, 0021))"
        );
    }
}
