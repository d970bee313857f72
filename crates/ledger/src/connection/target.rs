use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, Row};

use crate::LedgerError;

/// A connection idle this long is asked whether its server is still there
/// before it is handed out; one used more recently is handed out as it is
/// (the pool asked it as it took it back). Asking every time cost a round
/// trip before every call, on the writer's path too; a server gone within
/// the second fails that one call, whose error sends the pool looking for
/// the server again, as a failed ask would.
const ASKED_AFTER_IDLE: Duration = Duration::from_secs(1);

/// What stands between effectwatch and the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooler {
    /// The server itself, or a pooler that keeps a client's server for the
    /// whole session.
    None,
    /// A pooler that hands the server to another client after each transaction.
    Transaction,
}

impl Pooler {
    pub fn as_str(self) -> &'static str {
        match self {
            Pooler::None => "none",
            Pooler::Transaction => "transaction",
        }
    }
}

/// How a process connects to the ledger. Every connection names itself and
/// bounds its statements, so a stuck query shows up in pg_stat_activity
/// under our name and never hangs an operator.
#[derive(Clone)]
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

    /// The options for connecting straight to the (first) server, or
    /// through a pooler that keeps sessions; checks the whole URL.
    pub fn options(&self) -> Result<PgConnectOptions, LedgerError> {
        let hosts = Hosts::parse(&self.url)?;
        self.options_for(&hosts.urls[0], Pooler::None)
    }

    /// Behind a transaction pooler the startup packet carries only what the
    /// pooler tracks: the statement timeout is then set per transaction.
    fn options_for(&self, url: &str, pooler: Pooler) -> Result<PgConnectOptions, LedgerError> {
        let options = PgConnectOptions::from_str(url)
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

    pub(crate) fn pool(&self, url: &str, pooler: Pooler) -> Result<sqlx::PgPool, LedgerError> {
        Ok(PgPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout)
            .test_before_acquire(false)
            .before_acquire(|connection, taken| {
                Box::pin(async move {
                    if taken.idle_for >= ASKED_AFTER_IDLE {
                        connection.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_lazy_with(self.options_for(url, pooler)?))
    }
}

/// Which of several servers a pool wants, as libpq's `target_session_attrs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// Whichever answers first (one host, or `target_session_attrs=any`).
    Any,
    /// The one that takes writes: the primary, wherever it is now.
    Primary,
}

/// A URL as one URL per host, in the order given, and which of them to use.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hosts {
    pub urls: Vec<String>,
    pub wanted: Wanted,
}

impl Hosts {
    /// `postgres://u@h1:5432,h2:5433/db?…` (libpq's form of several hosts)
    /// becomes one URL per host. Several hosts want the primary unless
    /// `target_session_attrs=any` says otherwise; `target_session_attrs`
    /// itself is taken out, since the driver does not know it.
    pub fn parse(url: &str) -> Result<Hosts, LedgerError> {
        // The driver ignores the scheme: `mysql://host/db` would reach a PostgreSQL on
        // that host's default port instead of being refused as the wrong kind of URL.
        if !has_postgres_scheme(url) {
            return Err(LedgerError::BadUrl(
                "expected a URL starting with postgres:// or postgresql://".to_string(),
            ));
        }
        let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, host_list) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (tail, None),
        };
        let mut attrs = None;
        let kept: Vec<&str> = query
            .into_iter()
            .flat_map(|query| query.split('&'))
            .filter(|pair| match pair.split_once('=') {
                Some(("target_session_attrs", value)) => {
                    attrs = Some(value.to_string());
                    false
                }
                _ => !pair.is_empty(),
            })
            .collect();
        let query = if kept.is_empty() {
            String::new()
        } else {
            format!("?{}", kept.join("&"))
        };
        let hosts: Vec<&str> = host_list.split(',').collect();
        if hosts.len() > 1 && hosts.iter().any(|host| host.is_empty()) {
            return Err(LedgerError::BadUrl(
                "an empty host in the list of hosts".to_string(),
            ));
        }
        let wanted = match attrs.as_deref() {
            None if hosts.len() > 1 => Wanted::Primary,
            None | Some("any") => Wanted::Any,
            Some("read-write" | "primary") => Wanted::Primary,
            Some(other) => {
                return Err(LedgerError::BadUrl(format!(
                    "target_session_attrs={other} is not supported: use read-write (the primary) or any"
                )));
            }
        };
        Ok(Hosts {
            urls: hosts
                .iter()
                .map(|host| format!("{scheme}://{userinfo}{host}{path}{query}"))
                .collect(),
            wanted,
        })
    }
}

/// Names the server, never the URL: it may carry a password.
impl std::fmt::Debug for ConnectSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectSettings")
            .field("server", &self.server())
            .field("application_name", &self.application_name)
            .field("statement_timeout", &self.statement_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_connections", &self.max_connections)
            .field("pooler", &self.pooler)
            .finish()
    }
}

impl ConnectSettings {
    /// `host:port/database` without user or password, for saying which
    /// server the console is waiting on; every host of a list.
    pub fn server(&self) -> String {
        let Ok(hosts) = Hosts::parse(&self.url) else {
            return "?".to_string();
        };
        let named: Vec<String> = hosts.urls.iter().map(|url| server_name(url)).collect();
        named.join(",")
    }
}

/// `host:port/database` of a one-host URL, without credentials.
pub(crate) fn server_name(url: &str) -> String {
    match PgConnectOptions::from_str(url) {
        Ok(options) => format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("?")
        ),
        Err(_) => "?".to_string(),
    }
}

/// The server a pool should use now.
pub(crate) struct Found {
    pub url: String,
    pub pooler: Pooler,
}

/// The first host, in the order given, that answers and is what is wanted.
pub(crate) async fn find_server(
    settings: &ConnectSettings,
    hosts: &Hosts,
) -> Result<Found, LedgerError> {
    let mut passed_over = Vec::new();
    let mut errors = Vec::new();
    for url in &hosts.urls {
        match probe_host(settings, url, hosts.wanted).await {
            Ok(Some(pooler)) => {
                return Ok(Found {
                    url: url.clone(),
                    pooler,
                });
            }
            Ok(None) => passed_over.push(format!("{} is a standby", server_name(url))),
            Err(error) => {
                // The hint the whole error ends with is said once, not per host.
                let why = match &error {
                    LedgerError::Unreachable(why) | LedgerError::NotPrimary(why) => why.clone(),
                    other => other.to_string(),
                };
                passed_over.push(format!("{}: {why}", server_name(url)));
                errors.push(error);
            }
        }
    }
    // One host, or every host saying the same lasting thing (a refused
    // login, a missing schema): that error as it is.
    let lasting = errors.len() == hosts.urls.len() && errors.iter().all(LedgerError::is_permanent);
    if (lasting || hosts.urls.len() == 1)
        && let Some(error) = errors.pop()
    {
        return Err(error);
    }
    Err(LedgerError::Unreachable(format!(
        "no primary among the hosts ({})",
        passed_over.join("; ")
    )))
}

/// Whether `url` answers and is what is wanted (None: a standby where the
/// primary is wanted), and what stands in front of it.
async fn probe_host(
    settings: &ConnectSettings,
    url: &str,
    wanted: Wanted,
) -> Result<Option<Pooler>, LedgerError> {
    let (pooler, answer) = match settings.pooler {
        Some(pooler) => (pooler, probe(settings, url, pooler, wanted).await),
        None => match probe(settings, url, Pooler::None, wanted).await {
            // A pooler that refuses the startup option, or one told to drop
            // it (`ignore_startup_parameters = options`): either way the
            // statement timeout did not arrive, and the server may change
            // under us between statements.
            Err(refused) if is_pooler_refusal(&refused.to_string()) => (
                Pooler::Transaction,
                probe(settings, url, Pooler::Transaction, wanted).await,
            ),
            Ok(answer) if !answer.timeout_applied => (
                Pooler::Transaction,
                probe(settings, url, Pooler::Transaction, wanted).await,
            ),
            answer => (Pooler::None, answer),
        },
    };
    Ok(answer?.writable.then_some(pooler))
}

/// What a probe learnt of a server.
struct Probed {
    /// It takes writes (or writes were not asked about).
    writable: bool,
    /// The statement timeout asked for in the startup packet is in force.
    timeout_applied: bool,
}

/// A direct first connection reports the real cause (refused, bad
/// password, no such database); a pool would only say it timed out.
async fn probe(
    settings: &ConnectSettings,
    url: &str,
    pooler: Pooler,
    wanted: Wanted,
) -> Result<Probed, LedgerError> {
    let options = settings.options_for(url, pooler)?;
    let asked_ms = settings.statement_timeout.as_millis() as i64;
    let probe = tokio::time::timeout(settings.connect_timeout, async {
        let mut connection = PgConnection::connect_with(&options).await?;
        let question = match wanted {
            Wanted::Any => "select true, setting::bigint from pg_settings where name = 'statement_timeout'",
            Wanted::Primary => {
                "select not pg_is_in_recovery(), setting::bigint from pg_settings where name = 'statement_timeout'"
            }
        };
        // One simple-protocol round trip: outside a transaction a pooler may
        // hand the two halves of an extended query (parse, then bind) to two
        // server connections, the second of which knows no such statement.
        let row = connection.fetch_one(question).await?;
        let (writable, timeout_ms): (bool, i64) = (row.try_get(0)?, row.try_get(1)?);
        connection.close().await?;
        Ok::<Probed, sqlx::Error>(Probed {
            writable,
            timeout_applied: timeout_ms == asked_ms,
        })
    })
    .await;
    match probe {
        Ok(Ok(probed)) => Ok(probed),
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
    use super::{ConnectSettings, Hosts, Wanted, url_with_database};

    #[test]
    fn several_hosts_are_one_url_each_and_want_the_primary() {
        let hosts =
            Hosts::parse("postgres://ops:pw@db1:5432,db2:5433/ledger?sslmode=require").unwrap();
        assert_eq!(
            hosts.urls,
            [
                "postgres://ops:pw@db1:5432/ledger?sslmode=require",
                "postgres://ops:pw@db2:5433/ledger?sslmode=require"
            ]
        );
        assert_eq!(hosts.wanted, Wanted::Primary);
        let any = Hosts::parse("postgres://db1,db2/ledger?target_session_attrs=any").unwrap();
        assert_eq!(any.urls, ["postgres://db1/ledger", "postgres://db2/ledger"]);
        assert_eq!(any.wanted, Wanted::Any);
        let one =
            Hosts::parse("postgresql://db1/ledger?target_session_attrs=read-write&a=b").unwrap();
        assert_eq!(one.urls, ["postgresql://db1/ledger?a=b"]);
        assert_eq!(one.wanted, Wanted::Primary);
        assert_eq!(
            Hosts::parse("postgres://db1/ledger").unwrap().wanted,
            Wanted::Any
        );
    }

    #[test]
    fn settings_print_the_server_and_never_the_password() {
        let settings = ConnectSettings::new("postgres://ops:s3cret@db1:5432,db2:5432/ledger");
        let printed = format!("{settings:?}");
        assert!(
            printed.contains("db1:5432/ledger,db2:5432/ledger"),
            "{printed}"
        );
        assert!(!printed.contains("s3cret"), "{printed}");
    }

    #[test]
    fn a_host_list_the_ledger_cannot_use_is_refused_with_the_reason() {
        let standby_only = Hosts::parse("postgres://db1,db2/l?target_session_attrs=standby");
        assert!(
            standby_only
                .unwrap_err()
                .to_string()
                .contains("target_session_attrs=standby is not supported")
        );
        assert!(Hosts::parse("postgres://db1,,db2/l").is_err());
        assert!(Hosts::parse("mysql://db1,db2/l").is_err());
        let settings = ConnectSettings::new("postgres://ops:secret@db1:5432,db2:6432/ledger");
        assert_eq!(settings.server(), "db1:5432/ledger,db2:6432/ledger");
    }

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
