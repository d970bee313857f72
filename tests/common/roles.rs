//! Login roles for tests of the ledger's trust boundaries: each test makes
//! its own, member of one of the ledger's roles, and drops it at the end.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// A login role made for one test, member of one of the ledger's roles; dropped at the end.
pub struct LoginRole {
    pub name: String,
    admin_url: String,
}

impl LoginRole {
    pub async fn create(db: &super::TestDb, member_of: &str) -> LoginRole {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!(
            "ew_{}_{:x}_{}_{:x}",
            member_of.trim_start_matches("effect_"),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            nanos & 0xff_ffff_ffff
        );
        sqlx::query(AssertSqlSafe(format!(
            "create role \"{name}\" login in role {member_of}"
        )))
        .execute(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("creating role {name}: {e}"));
        LoginRole {
            name,
            admin_url: db.url.clone(),
        }
    }

    /// Connects as this role, or says why it cannot and returns None when the server of
    /// DATABASE_URL does not let a password-less role in (only there; the private cluster must).
    pub async fn connect(&self, db: &super::TestDb) -> Option<PgConnection> {
        let options = PgConnectOptions::from_str(&db.url)
            .unwrap()
            .username(&self.name)
            .password("")
            .application_name("effectwatch-test-roles");
        match PgConnection::connect_with(&options).await {
            Ok(conn) => Some(conn),
            Err(e) if std::env::var("DATABASE_URL").is_ok_and(|u| !u.is_empty()) => {
                eprintln!(
                    "skipping: the server of DATABASE_URL does not let role {} log in without a password: {e}",
                    self.name
                );
                None
            }
            Err(e) => panic!("connecting as {}: {e}", self.name),
        }
    }
}

impl Drop for LoginRole {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), async {
                    let mut admin = PgConnection::connect(&url).await.ok()?;
                    let result =
                        sqlx::query(AssertSqlSafe(format!("drop role if exists \"{name}\"")))
                            .execute(&mut admin)
                            .await;
                    if let Err(e) = result {
                        eprintln!("note: could not drop role {name}: {e}");
                    }
                    admin.close().await.ok()
                })
                .await
                .ok()
                .flatten()
            })
        });
        let _ = dropped.join();
    }
}
