//! The server and the benchmark's databases.

use super::*;
use effectwatch::connection::url_with_database;
#[allow(unused_imports)]
use effectwatch::ledger::LedgerPool;

pub(crate) struct Server {
    /// URL of a maintenance database on the server, to create and drop ours.
    pub(crate) admin_url: String,
    pub(crate) cluster: Option<LocalCluster>,
    pub(crate) origin: String,
}

impl Server {
    pub(crate) fn start() -> Result<Server> {
        if let Ok(url) = std::env::var("DATABASE_URL")
            && !url.trim().is_empty()
        {
            return Ok(Server {
                admin_url: url.trim().to_string(),
                cluster: None,
                origin: "DATABASE_URL".to_string(),
            });
        }
        let cpu_bound = std::env::var("EW_BENCH_CPU_BOUND").is_ok_and(|v| v.trim() == "1");
        eprintln!(
            "[setup] DATABASE_URL unset: starting a private PostgreSQL cluster ({})",
            if cpu_bound {
                "CPU-bound: fsync=off, synchronous_commit=off"
            } else {
                "durable settings"
            }
        );
        let cluster = LocalCluster::start(ClusterOptions {
            fast_unsafe: cpu_bound,
            ..Default::default()
        })
        .context("starting a local PostgreSQL cluster")?;
        // Stops the server even if this process is killed before it can drop the cluster.
        if let Err(error) = cluster.stop_when_process_exits(std::process::id()) {
            eprintln!("[setup] warning: no watchdog for the local cluster: {error}");
        }
        Ok(Server {
            admin_url: cluster.url("postgres"),
            origin: format!("private cluster on 127.0.0.1:{}", cluster.port()),
            cluster: Some(cluster),
        })
    }

    pub(crate) fn stop(self) {
        if let Some(cluster) = self.cluster {
            eprintln!("[setup] stopping the private cluster");
            if let Err(error) = cluster.stop() {
                eprintln!("[setup] warning: stopping the local cluster: {error}");
            }
        }
    }
}

pub(crate) fn options(url: &str) -> Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url)
        .context("invalid database URL")?
        .application_name("effectwatch-bench"))
}

/// A database of ours on the server, dropped by [`BenchDb::drop_db`].
pub(crate) struct BenchDb {
    pub(crate) name: String,
    pub(crate) url: String,
    pub(crate) admin_url: String,
}

impl BenchDb {
    pub(crate) async fn create(server: &Server, suffix: &str) -> Result<BenchDb> {
        let name = format!("ew_bench_{}_{suffix}", std::process::id());
        let mut admin = PgConnection::connect_with(&options(&server.admin_url)?)
            .await
            .context("connecting to the server")?;
        sqlx::query(AssertSqlSafe(format!("drop database if exists \"{name}\"")))
            .execute(&mut admin)
            .await?;
        sqlx::query(AssertSqlSafe(format!("create database \"{name}\"")))
            .execute(&mut admin)
            .await
            .with_context(|| format!("creating database {name}"))?;
        admin.close().await?;
        eprintln!("[setup] created database {name}");
        Ok(BenchDb {
            url: url_with_database(&server.admin_url, &name),
            name,
            admin_url: server.admin_url.clone(),
        })
    }

    pub(crate) async fn pool(&self, max: u32) -> Result<LedgerPool> {
        Ok(PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options(&self.url)?)
            .await?
            .into())
    }

    pub(crate) async fn drop_db(self) {
        // EW_BENCH_KEEP=1 keeps the ledgers, to look at their plans by hand afterwards.
        if std::env::var("EW_BENCH_KEEP").is_ok_and(|v| v.trim() == "1") {
            eprintln!("[setup] kept database {} ({})", self.name, self.url);
            return;
        }
        let result = async {
            let mut admin = PgConnection::connect_with(&options(&self.admin_url)?).await?;
            sqlx::query(AssertSqlSafe(format!(
                "drop database if exists \"{}\" with (force)",
                self.name
            )))
            .execute(&mut admin)
            .await?;
            admin.close().await?;
            anyhow::Ok(())
        }
        .await;
        match result {
            Ok(()) => eprintln!("[setup] dropped database {}", self.name),
            Err(error) => eprintln!("[setup] warning: dropping database {}: {error}", self.name),
        }
    }
}

/// Runs a statement with the simple protocol (utility statements, several statements).
pub(crate) async fn exec_raw(pool: &LedgerPool, sql: &str) -> Result<()> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
        .execute(pool)
        .await
        .with_context(|| format!("running {sql:?}"))?;
    Ok(())
}

/// A checkpoint before each writer round, so no round pays for the previous one's dirty pages.
/// Needs superuser or pg_checkpoint; skipped silently otherwise.
pub(crate) async fn checkpoint(pool: &LedgerPool) {
    let _ = sqlx::raw_sql("checkpoint").execute(pool).await;
}
