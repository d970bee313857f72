//! How effectwatch reaches the ledger's server: the connection settings,
//! the hosts of a URL and which of them is the primary, what stands in front
//! of it (a transaction pooler), and the pool that follows the primary after
//! a failover. Nothing here knows the ledger's schema.

pub mod pool;
pub mod target;

pub use pool::{LedgerPool, LedgerTransaction};
pub use target::{ConnectSettings, Pooler, url_with_database};

use crate::LedgerError;
use target::{Hosts, find_server, server_name};

/// Opens a pool and proves it works with one round trip, so a wrong URL or
/// a down server is reported here, once, rather than at the first query.
/// Unless told, it finds out whether a transaction pooler stands in front:
/// such a pooler refuses the startup options a server takes. Of several
/// hosts it takes the primary, and the pool follows the primary when it
/// moves (see [`LedgerPool`]).
pub async fn connect(settings: &ConnectSettings) -> Result<LedgerPool, LedgerError> {
    let hosts = Hosts::parse(&settings.url)?;
    let found = find_server(settings, &hosts).await?;
    let pool = settings.pool(&found.url, found.pooler)?;
    let following = (hosts.urls.len() > 1).then(|| (settings.clone(), hosts));
    Ok(LedgerPool::new(
        pool,
        found.pooler,
        settings.statement_timeout.as_millis(),
        server_name(&found.url),
        following,
    ))
}

/// A pool that connects on first use: for a console that must open (and
/// show the database as unreachable) even when the server is down. It
/// cannot look first, so unless told it takes the way that works both
/// straight to the server and through a transaction pooler.
/// Of several hosts it starts on the first and finds the primary at the
/// first failure.
pub fn connect_lazy(settings: &ConnectSettings) -> Result<LedgerPool, LedgerError> {
    let pooler = settings.pooler.unwrap_or(Pooler::Transaction);
    let hosts = Hosts::parse(&settings.url)?;
    let first = hosts.urls[0].clone();
    let pool = settings.pool(&first, pooler)?;
    let following = (hosts.urls.len() > 1).then(|| (settings.clone(), hosts));
    let pool = LedgerPool::new(
        pool,
        pooler,
        settings.statement_timeout.as_millis(),
        server_name(&first),
        following,
    );
    if pool.follows() {
        pool.suspect();
    }
    Ok(pool)
}
