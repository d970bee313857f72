//! `effectwatch --version`: the binary's version and the schema it makes,
//! and the configured ledger's schema, so an operator can tell before an
//! upgrade whether `effectwatch migrate` has work to do.

use std::time::Duration;

use super::check::health::schema_difference;
use super::exit::Failure;
use crate::config::Config;
use crate::ledger::migrate::{SchemaVersion, ledger_schema};

/// How long `--version` waits for the ledger before saying it cannot tell.
const LEDGER_WAIT: Duration = Duration::from_secs(3);

pub async fn run(database_url: Option<String>, config: &Config) -> Result<(), Failure> {
    let binary = SchemaVersion::of_binary();
    println!(
        "effectwatch {} (ledger schema {binary})",
        env!("CARGO_PKG_VERSION")
    );
    let Some(url) = database_url else {
        return Ok(());
    };
    let mut settings = config.connect_settings(url, "version");
    settings.connect_timeout = LEDGER_WAIT;
    settings.max_connections = 1;
    let line = match tokio::time::timeout(LEDGER_WAIT * 2, async {
        let pool = crate::ledger::connect(&settings).await?;
        let schema = ledger_schema(&pool).await;
        pool.close().await;
        schema
    })
    .await
    {
        Err(_) => "ledger: cannot tell (no answer within 6 s)".to_string(),
        Ok(Err(error)) => format!("ledger: cannot tell ({error})"),
        Ok(Ok(None)) => "ledger: no schema installed (run `effectwatch migrate`)".to_string(),
        Ok(Ok(Some(ledger))) => match schema_difference(&ledger, &binary) {
            None => format!("ledger: schema {ledger}, the same"),
            Some(what) => format!("ledger: {what}"),
        },
    };
    println!("{}", crate::text::message_line(&line));
    Ok(())
}
