use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};

use super::LedgerError;
use super::pool::{LedgerPool, Pooler};

/// How a process connects to the ledger. Every connection names itself and
/// bounds its statements, so a stuck query shows up in pg_stat_activity
/// under our name and never hangs an operator.
#[derive(Debug, Clone)]
pub struct ConnectSettings {
    pub url: String,
    pub application_name: String,
    pub statement_timeout: Duration,
    pub connect_timeout: Duration,
    pub max_connections: u32,
    /// What stands in front of the server; `None` finds out when connecting.
    pub pooler: Option<Pooler>,
}

impl ConnectSettings {
    pub fn new(url: impl Into<String>) -> Self {
        ConnectSettings {
            url: url.into(),
            application_name: "effectwatch".to_string(),
            statement_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            max_connections: 4,
            pooler: None,
        }
    }

    /// The options for connecting straight to the server (or through a
    /// pooler that keeps sessions).
    pub fn options(&self) -> Result<PgConnectOptions, LedgerError> {
        self.options_for(Pooler::None)
    }

    /// Behind a transaction pooler the startup packet carries only what the
    /// pooler tracks: the statement timeout is then set per transaction.
    fn options_for(&self, pooler: Pooler) -> Result<PgConnectOptions, LedgerError> {
        // The driver ignores the scheme: `mysql://host/db` would reach a PostgreSQL on
        // that host's default port instead of being refused as the wrong kind of URL.
        if !has_postgres_scheme(&self.url) {
            return Err(LedgerError::BadUrl(
                "expected a URL starting with postgres:// or postgresql://".to_string(),
            ));
        }
        let options = PgConnectOptions::from_str(&self.url)
            .map_err(|error| LedgerError::BadUrl(first_line(&error.to_string())))?;
        let options = options.application_name(&self.application_name);
        Ok(match pooler {
            Pooler::None => {
                let timeout_ms = self.statement_timeout.as_millis().to_string();
                options.options([("statement_timeout", timeout_ms.as_str())])
            }
            Pooler::Transaction => options.extra_float_digits(None).statement_cache_capacity(0),
        })
    }

    fn pool(&self, options: PgConnectOptions, pooler: Pooler) -> LedgerPool {
        let pool = PgPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout)
            .connect_lazy_with(options);
        LedgerPool::new(pool, pooler, self.statement_timeout.as_millis())
    }
}

impl ConnectSettings {
    /// `host:port/database` without user or password, for saying which
    /// server the console is waiting on.
    pub fn server(&self) -> String {
        match self.options() {
            Ok(options) => format!(
                "{}:{}/{}",
                options.get_host(),
                options.get_port(),
                options.get_database().unwrap_or("?")
            ),
            Err(_) => "?".to_string(),
        }
    }
}

/// Opens a pool and proves it works with one round trip, so a wrong URL or
/// a down server is reported here, once, rather than at the first query.
/// Unless told, it finds out whether a transaction pooler stands in front:
/// such a pooler refuses the startup options a server takes.
pub async fn connect(settings: &ConnectSettings) -> Result<LedgerPool, LedgerError> {
    let pooler = match settings.pooler {
        Some(pooler) => {
            probe(settings, pooler).await?;
            pooler
        }
        None => match probe(settings, Pooler::None).await {
            Err(refused) if is_pooler_refusal(&refused.to_string()) => {
                probe(settings, Pooler::Transaction).await?;
                Pooler::Transaction
            }
            other => other.map(|()| Pooler::None)?,
        },
    };
    Ok(settings.pool(settings.options_for(pooler)?, pooler))
}

/// A direct first connection reports the real cause (refused, bad
/// password, no such database); a pool would only say it timed out.
async fn probe(settings: &ConnectSettings, pooler: Pooler) -> Result<(), LedgerError> {
    let options = settings.options_for(pooler)?;
    let probe = tokio::time::timeout(settings.connect_timeout, async {
        let mut connection = PgConnection::connect_with(&options).await?;
        sqlx::query_scalar::<_, i32>("select 1")
            .persistent(false)
            .fetch_one(&mut connection)
            .await?;
        connection.close().await
    })
    .await;
    match probe {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(LedgerError::from_sqlx(error)),
        Err(_) => Err(LedgerError::Unreachable(format!(
            "no answer within {} s",
            settings.connect_timeout.as_secs()
        ))),
    }
}

/// PgBouncer's answer to a startup option it does not pass on.
fn is_pooler_refusal(message: &str) -> bool {
    message.contains("unsupported startup parameter")
}

fn has_postgres_scheme(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
    })
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

/// A pool that connects on first use: for a console that must open (and
/// show the database as unreachable) even when the server is down. It
/// cannot look first, so unless told it takes the way that works both
/// straight to the server and through a transaction pooler.
pub fn connect_lazy(settings: &ConnectSettings) -> Result<LedgerPool, LedgerError> {
    let pooler = settings.pooler.unwrap_or(Pooler::Transaction);
    Ok(settings.pool(settings.options_for(pooler)?, pooler))
}

/// `url` with its database (path) replaced, keeping credentials, host and
/// parameters: another database on the same server.
pub fn url_with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut result = format!("{}/{database}", &base[..authority_end]);
    if let Some(query) = query {
        result.push('?');
        result.push_str(query);
    }
    result
}

#[cfg(test)]
mod server_tests {
    use super::{ConnectSettings, url_with_database};

    #[test]
    fn the_server_is_named_without_its_credentials() {
        let settings = ConnectSettings::new("postgres://ops:s3cret@db.internal:6543/ledger");
        assert_eq!(settings.server(), "db.internal:6543/ledger");
    }

    #[test]
    fn another_database_on_the_same_server_keeps_everything_else() {
        assert_eq!(
            url_with_database("postgres://u:p@h:5/a?sslmode=disable", "b"),
            "postgres://u:p@h:5/b?sslmode=disable"
        );
        assert_eq!(url_with_database("postgres://h", "b"), "postgres://h/b");
    }
}
