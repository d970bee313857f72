//! Installs or upgrades the ledger schema, compiled into the binary so a
//! deployed console needs no source tree. It is made of two kinds of file:
//!
//! - migrations (`sql/migrations/`): tables, types, indexes and data,
//!   add-only. The schema has released versions, each naming the last
//!   migration it holds; a released migration is never edited again (a test
//!   pins its text), so a ledger of any released version upgrades in place.
//! - definitions (`sql/functions/`, `sql/views/`): each function and view in
//!   a file of its own, holding its current text and its grants, re-applied
//!   by `migrate` whenever its checksum is not the one the ledger recorded.
//!   A change a `create or replace` cannot make (a function's parameters or
//!   result, a view's columns) drops the old one in a migration first.
//!
//! Pending migrations, then changed definitions, apply in one transaction.

use super::LedgerPool;
use sqlx::migrate::Migrator;

use super::LedgerError;

pub static MIGRATOR: Migrator = sqlx::migrate!("../../sql/migrations");

/// One function or view of the ledger: its file under `sql/` and its text.
#[derive(Debug, Clone, Copy)]
pub struct Definition {
    pub file: &'static str,
    pub sql: &'static str,
}

// `DEFINITIONS`: every file of `sql/functions/` then of `sql/views/`, each
// in name order — the order `migrate` applies them in.
include!(concat!(env!("OUT_DIR"), "/definitions.rs"));

impl Definition {
    pub fn checksum(&self) -> Vec<u8> {
        use sha2::Digest;
        sha2::Sha256::digest(self.sql.as_bytes()).to_vec()
    }
}

/// One digest of every definition's file and checksum: what a release pins,
/// the first 16 hex digits of a SHA-256.
pub fn definitions_digest() -> String {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    for definition in DEFINITIONS {
        hasher.update(definition.file.as_bytes());
        hasher.update(b"\0");
        hasher.update(definition.checksum());
    }
    hasher
        .finalize()
        .iter()
        .take(8)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The definitions whose text this ledger does not have: changed since it
/// recorded them, or never applied. `recorded` is (file, checksum).
pub fn definitions_to_apply(recorded: &[(String, Vec<u8>)]) -> Vec<&'static Definition> {
    let recorded: std::collections::HashMap<&str, &[u8]> = recorded
        .iter()
        .map(|(file, sum)| (file.as_str(), sum.as_slice()))
        .collect();
    DEFINITIONS
        .iter()
        .filter(|definition| {
            recorded.get(definition.file) != Some(&definition.checksum().as_slice())
        })
        .collect()
}

/// Released schema versions, oldest first: (version, its last migration).
pub const RELEASED: &[(u32, i64)] = &[(1, 18)];

/// A ledger's (or this binary's) schema: the last released version its
/// migrations hold, and the migrations beyond it, not yet released.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchemaVersion {
    pub released: u32,
    pub unreleased: Vec<i64>,
}

impl SchemaVersion {
    pub fn of(migrations: &[i64]) -> SchemaVersion {
        let last = migrations.iter().copied().max().unwrap_or(0);
        let (released, covered) = RELEASED
            .iter()
            .rev()
            .find(|(_, through)| *through <= last)
            .copied()
            .unwrap_or((0, 0));
        let mut unreleased: Vec<i64> = migrations
            .iter()
            .copied()
            .filter(|version| *version > covered)
            .collect();
        unreleased.sort_unstable();
        SchemaVersion {
            released,
            unreleased,
        }
    }

    /// The schema these migrations, compiled into this binary, make.
    pub fn of_binary() -> SchemaVersion {
        let versions: Vec<i64> = MIGRATOR.iter().map(|migration| migration.version).collect();
        SchemaVersion::of(&versions)
    }
}

impl std::fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.released, self.unreleased.as_slice()) {
            (0, []) => write!(f, "none"),
            (0, more) => write!(f, "unreleased ({} migrations)", more.len()),
            (version, []) => write!(f, "{version}"),
            (version, more) => write!(
                f,
                "{version} + {} ({})",
                crate::format::count_of(
                    more.len(),
                    "unreleased migration",
                    "unreleased migrations"
                ),
                more.iter()
                    .map(|v| format!("{v:04}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// How a ledger's applied migrations stand against this binary's: what
/// `--version` and `check` say of it, and what a command refuses it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// No migration applied: no ledger schema in this database.
    Missing,
    /// The same migrations, with the same text.
    Same(SchemaVersion),
    /// Migrations of this binary not applied yet, and none it does not
    /// know: `effectwatch migrate` brings it up to date.
    Older {
        ledger: SchemaVersion,
        binary: SchemaVersion,
    },
    /// Every migration of this binary, then later ones it does not know:
    /// a newer effectwatch upgraded it.
    Newer {
        ledger: SchemaVersion,
        binary: SchemaVersion,
        first_unknown: i64,
    },
    /// The same migrations, but functions or views whose text is not this
    /// binary's (`files`): `effectwatch migrate` applies this binary's.
    Redefined {
        ledger: SchemaVersion,
        files: Vec<String>,
    },
    /// Not this binary's line of migrations: one applied with other text
    /// (a released migration edited), or one it does not know among its
    /// own. Migrate cannot mend it.
    Differs { what: String },
}

impl Standing {
    /// `applied` (version, checksum) against `ours` (version, checksum,
    /// description).
    pub fn between(applied: &[(i64, Vec<u8>)], ours: &[(i64, &[u8], &str)]) -> Standing {
        if applied.is_empty() {
            return Standing::Missing;
        }
        let ours_of = |version: i64| ours.iter().find(|(v, _, _)| *v == version);
        for (version, checksum) in applied {
            if let Some((_, theirs, description)) = ours_of(*version)
                && *theirs != checksum.as_slice()
            {
                let released = RELEASED.iter().any(|(_, through)| version <= through);
                let how = if released {
                    "a released migration was edited"
                } else {
                    "an unreleased migration changed after this ledger applied it"
                };
                return Standing::Differs {
                    what: format!(
                        "migration {version:04} ({description}) in this ledger is not this \
                         effectwatch's text of it ({how})"
                    ),
                };
            }
        }
        let newest_ours = ours.iter().map(|(v, _, _)| *v).max().unwrap_or(0);
        let unknown: Vec<i64> = applied
            .iter()
            .map(|(version, _)| *version)
            .filter(|version| ours_of(*version).is_none())
            .collect();
        if let Some(stray) = unknown.iter().find(|version| **version < newest_ours) {
            return Standing::Differs {
                what: format!(
                    "migration {stray:04} in this ledger is not one this effectwatch knows, though \
                     older than its newest ({newest_ours:04})"
                ),
            };
        }
        let missing = ours
            .iter()
            .map(|(version, _, _)| *version)
            .find(|version| !applied.iter().any(|(v, _)| v == version));
        let ledger = SchemaVersion::of(&applied.iter().map(|(v, _)| *v).collect::<Vec<_>>());
        let binary = SchemaVersion::of(&ours.iter().map(|(v, _, _)| *v).collect::<Vec<_>>());
        match (unknown.first(), missing) {
            (None, None) => Standing::Same(ledger),
            (None, Some(_)) => Standing::Older { ledger, binary },
            (Some(first_unknown), None) => Standing::Newer {
                ledger,
                binary,
                first_unknown: *first_unknown,
            },
            (Some(first_unknown), Some(missing)) => Standing::Differs {
                what: format!(
                    "this ledger has migration {first_unknown:04}, which this effectwatch does not \
                     know, but not {missing:04}, which it does"
                ),
            },
        }
    }

    /// What a command that needs this binary's schema fails with on this
    /// ledger, one line that says what to do; None when it is the same.
    pub fn error(&self) -> Option<LedgerError> {
        match self {
            Standing::Same(_) => None,
            Standing::Missing => Some(LedgerError::SchemaBehind(
                "no ledger schema is installed in this database".to_string(),
            )),
            Standing::Older { ledger, binary } => Some(LedgerError::SchemaBehind(format!(
                "ledger schema {ledger} is older than this effectwatch's {binary}"
            ))),
            Standing::Newer {
                ledger,
                binary,
                first_unknown,
            } => Some(LedgerError::LedgerNewer(format!(
                "ledger schema {ledger} is newer than this effectwatch's {binary} (migration \
                 {first_unknown:04} is not one it knows)"
            ))),
            Standing::Redefined { ledger, files } => {
                let shown: Vec<&str> = files.iter().take(3).map(String::as_str).collect();
                let more = if files.len() > shown.len() {
                    ", …"
                } else {
                    ""
                };
                Some(LedgerError::SchemaBehind(format!(
                    "ledger schema {ledger} has {} not this effectwatch's ({}{more})",
                    crate::format::count_of(files.len(), "function or view", "functions or views"),
                    shown.join(", ")
                )))
            }
            Standing::Differs { what } => Some(LedgerError::MigrationsDiffer(what.clone())),
        }
    }

    /// The same migrations are not yet the same schema: the definitions
    /// still to apply (`to_apply`) make it `Redefined`.
    pub fn with_definitions(self, to_apply: &[&Definition]) -> Standing {
        match self {
            Standing::Same(ledger) if !to_apply.is_empty() => Standing::Redefined {
                ledger,
                files: to_apply.iter().map(|d| d.file.to_string()).collect(),
            },
            other => other,
        }
    }
}

/// How the ledger's migrations stand against this binary's.
pub async fn standing(pool: &LedgerPool) -> Result<Standing, LedgerError> {
    let applied = applied_migrations(pool).await?;
    let ours: Vec<(i64, &[u8], &str)> = MIGRATOR
        .iter()
        .filter(|migration| migration.migration_type.is_up_migration())
        .map(|migration| {
            (
                migration.version,
                migration.checksum.as_ref(),
                migration.description.as_ref(),
            )
        })
        .collect();
    let recorded = recorded_definitions(pool).await?;
    Ok(Standing::between(&applied, &ours).with_definitions(&definitions_to_apply(&recorded)))
}

/// The ledger's schema, or `None` when none is installed.
pub async fn ledger_schema(pool: &LedgerPool) -> Result<Option<SchemaVersion>, LedgerError> {
    let applied = applied_migrations(pool).await?;
    if applied.is_empty() {
        return Ok(None);
    }
    let versions: Vec<i64> = applied.iter().map(|(version, _)| *version).collect();
    Ok(Some(SchemaVersion::of(&versions)))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The migrations applied, as `0027 heartbeats`.
    pub applied: Vec<String>,
    pub already: usize,
    /// The function and view files applied, as `functions/heartbeat.sql`.
    pub definitions: Vec<String>,
}

/// Creates the database `name` on the cluster `admin` is connected to,
/// unless it exists; says whether it made it.
pub async fn create_database_if_missing(
    admin: &LedgerPool,
    name: &str,
) -> Result<bool, LedgerError> {
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(name)
            .fetch_one(admin)
            .await?;
    if exists {
        return Ok(false);
    }
    let quoted: String = sqlx::query_scalar("select quote_ident($1)")
        .bind(name)
        .fetch_one(admin)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("create database {quoted}")))
        .execute(admin)
        .await?;
    Ok(true)
}

/// Applies what is missing; running it again applies nothing and says so.
/// A ledger made by migrations other than these is refused with one line
/// saying so, never half-upgraded.
pub async fn run(pool: &LedgerPool) -> Result<MigrationReport, LedgerError> {
    run_through(pool, i64::MAX).await
}

/// [`run`], stopping after migration `last`: the ledger of an earlier
/// release, as a user who installed it has one.
pub async fn run_through(pool: &LedgerPool, last: i64) -> Result<MigrationReport, LedgerError> {
    // Migrations hold a session-level lock and prepare statements as a
    // session does: a transaction pooler would hand their server away.
    if pool.pooler() == super::Pooler::Transaction {
        return Err(LedgerError::Invalid(
            "migrate needs a connection of its own: run it with a URL straight to the server, not through the transaction pooler".to_string(),
        ));
    }
    // A ledger this binary is behind, or that is not of its line, is
    // refused with one line saying which, never half-upgraded.
    let standing = standing(pool).await?;
    if matches!(standing, Standing::Newer { .. } | Standing::Differs { .. })
        && let Some(error) = standing.error()
    {
        return Err(error.nothing_changed());
    }
    let applied = applied_migrations(pool).await?;
    let done: Vec<i64> = applied.iter().map(|(version, _)| *version).collect();
    let pending: Vec<&sqlx::migrate::Migration> = MIGRATOR
        .iter()
        .filter(|migration| migration.migration_type.is_up_migration())
        .filter(|migration| migration.version <= last)
        .filter(|migration| !done.contains(&migration.version))
        .collect();
    // An earlier release's ledger keeps that release's functions: the
    // definitions are this binary's, for its whole line of migrations.
    let through_all = MIGRATOR.iter().all(|migration| migration.version <= last);
    let definitions = if through_all {
        definitions_to_apply(&recorded_definitions(pool).await?)
    } else {
        Vec::new()
    };
    if !pending.is_empty() || !definitions.is_empty() {
        apply_in_one_transaction(pool, &pending, &definitions).await?;
    }
    // A ledger stopped at an older release keeps the months that release made.
    let makes_months: bool = sqlx::query_scalar(
        "select to_regprocedure('ledger.ensure_next_history_months()') is not null",
    )
    .fetch_one(pool)
    .await?;
    if makes_months {
        super::retention::ensure_months(pool).await?;
    }
    let applied = pending
        .iter()
        .map(|migration| format!("{:04} {}", migration.version, migration.description))
        .collect();
    Ok(MigrationReport {
        applied,
        already: done.len(),
        definitions: definitions.iter().map(|d| d.file.to_string()).collect(),
    })
}

/// Applies `pending` in one transaction, under the lock every migrate
/// takes: a ledger is upgraded whole or not at all, and two migrates at
/// once apply each migration once. The bookkeeping table is the one the
/// SQL toolkit's migrator keeps, so either can read the other's.
async fn apply_in_one_transaction(
    pool: &LedgerPool,
    pending: &[&sqlx::migrate::Migration],
    definitions: &[&Definition],
) -> Result<(), LedgerError> {
    use sqlx::Connection;
    let failed = |step: &str, error: sqlx::Error| {
        LedgerError::Database(format!("migration failed ({step}): {error}"))
    };
    let mut connection = pool
        .session_pool()
        .acquire()
        .await
        .map_err(|error| failed("connect", error))?;
    let mut tx = connection
        .begin()
        .await
        .map_err(|error| failed("begin", error))?;
    sqlx::query("select pg_advisory_xact_lock(hashtext('effectwatch migrate'))")
        .execute(&mut *tx)
        .await
        .map_err(|error| failed("lock", error))?;
    sqlx::raw_sql(
        "create table if not exists public._sqlx_migrations (
            version bigint primary key,
            description text not null,
            installed_on timestamptz not null default now(),
            success boolean not null,
            checksum bytea not null,
            execution_time bigint not null)",
    )
    .execute(&mut *tx)
    .await
    .map_err(|error| failed("bookkeeping", error))?;
    sqlx::raw_sql(
        "create table if not exists public.effectwatch_definitions (
            file text primary key,
            checksum bytea not null,
            applied_on timestamptz not null default now())",
    )
    .execute(&mut *tx)
    .await
    .map_err(|error| failed("bookkeeping", error))?;
    for migration in pending {
        // Another migrate may have applied it while this one waited for the lock.
        let done: bool = sqlx::query_scalar(
            "select exists (select 1 from public._sqlx_migrations where version = $1 and success)",
        )
        .bind(migration.version)
        .fetch_one(&mut *tx)
        .await
        .map_err(|error| failed("bookkeeping", error))?;
        if done {
            continue;
        }
        let started = std::time::Instant::now();
        sqlx::raw_sql(migration.sql.clone())
            .execute(&mut *tx)
            .await
            .map_err(|error| {
                failed(
                    &format!("{:04} {}", migration.version, migration.description),
                    error,
                )
            })?;
        sqlx::query(
            "insert into public._sqlx_migrations (version, description, success, checksum, execution_time)
             values ($1, $2, true, $3, $4)",
        )
        .bind(migration.version)
        .bind(migration.description.as_ref())
        .bind(migration.checksum.as_ref())
        .bind(i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await
        .map_err(|error| failed("bookkeeping", error))?;
    }
    // Files apply in name order; a function may call one whose file comes
    // later, so bodies are checked when they run, as a restored dump's are.
    sqlx::query("set local check_function_bodies = off")
        .execute(&mut *tx)
        .await
        .map_err(|error| failed("bookkeeping", error))?;
    for definition in definitions {
        sqlx::raw_sql(sqlx::AssertSqlSafe(definition.sql))
            .execute(&mut *tx)
            .await
            .map_err(|error| failed(definition.file, error))?;
        sqlx::query(
            "insert into public.effectwatch_definitions (file, checksum) values ($1, $2)
             on conflict (file) do update set checksum = excluded.checksum, applied_on = now()",
        )
        .bind(definition.file)
        .bind(definition.checksum())
        .execute(&mut *tx)
        .await
        .map_err(|error| failed("bookkeeping", error))?;
    }
    tx.commit().await.map_err(|error| failed("commit", error))
}

/// The definitions this ledger recorded applying: (file, checksum).
async fn recorded_definitions(pool: &LedgerPool) -> Result<Vec<(String, Vec<u8>)>, LedgerError> {
    let exists: bool =
        sqlx::query_scalar("select to_regclass('public.effectwatch_definitions') is not null")
            .fetch_one(pool)
            .await?;
    if !exists {
        return Ok(Vec::new());
    }
    Ok(
        sqlx::query_as("select file, checksum from public.effectwatch_definitions")
            .fetch_all(pool)
            .await?,
    )
}

async fn applied_migrations(pool: &LedgerPool) -> Result<Vec<(i64, Vec<u8>)>, LedgerError> {
    let exists: bool =
        sqlx::query_scalar("select to_regclass('public._sqlx_migrations') is not null")
            .fetch_one(pool)
            .await?;
    if !exists {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_as(
        "select version, checksum from public._sqlx_migrations where success order by version",
    )
    .fetch_all(pool)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &[(i64, &[u8], &str)] = &[
        (1, b"a", "tables"),
        (2, b"b", "panes"),
        (19, b"c", "asked again"),
    ];

    fn applied(list: &[(i64, &[u8])]) -> Vec<(i64, Vec<u8>)> {
        list.iter().map(|(v, sum)| (*v, sum.to_vec())).collect()
    }

    #[test]
    fn each_way_a_ledger_stands_has_its_own_sentence_and_error() {
        assert_eq!(Standing::between(&[], OURS), Standing::Missing);
        let same = Standing::between(&applied(&[(1, b"a"), (2, b"b"), (19, b"c")]), OURS);
        assert!(matches!(same, Standing::Same(_)) && same.error().is_none());

        let older = Standing::between(&applied(&[(1, b"a"), (2, b"b")]), OURS);
        assert!(matches!(older.error(), Some(LedgerError::SchemaBehind(_))));
        assert!(
            older
                .error()
                .unwrap()
                .to_string()
                .ends_with("run `effectwatch migrate`")
        );

        let newer = Standing::between(
            &applied(&[(1, b"a"), (2, b"b"), (19, b"c"), (25, b"d")]),
            OURS,
        );
        assert!(matches!(
            newer,
            Standing::Newer {
                first_unknown: 25,
                ..
            }
        ));
        assert!(matches!(newer.error(), Some(LedgerError::LedgerNewer(_))));

        let edited = Standing::between(&applied(&[(1, b"a"), (2, b"x")]), OURS);
        let said = edited.error().unwrap().to_string();
        assert!(said.contains("migration 0002 (panes)"), "{said}");
        assert!(said.contains("released migration was edited"), "{said}");
        assert!(!said.contains("run `effectwatch migrate`"), "{said}");

        let stray = Standing::between(&applied(&[(1, b"a"), (5, b"e")]), OURS);
        assert!(matches!(
            stray.error(),
            Some(LedgerError::MigrationsDiffer(_))
        ));
        let other_line = Standing::between(&applied(&[(1, b"a"), (25, b"d")]), OURS);
        assert!(matches!(other_line, Standing::Differs { .. }));
    }
}
