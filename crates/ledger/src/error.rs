use thiserror::Error;

/// What went wrong talking to the ledger, phrased for the operator who
/// must act on it. Variants map to distinct CLI exit codes.
#[derive(Debug, Error)]
pub enum LedgerError {
    #[error("invalid database URL: {0}")]
    BadUrl(String),
    #[error(
        "cannot reach the database: {0} (is the server running, and the host, port and credentials of the URL right?)"
    )]
    Unreachable(String),
    /// The server answered but is not (or no longer) a primary: it is
    /// shutting down, starting, or a standby — as while a failover moves
    /// the primary. The call did not happen; it may once a primary answers.
    #[error(
        "the database is not taking writes now: {0} (a primary moving? list every host in the URL with target_session_attrs=read-write to follow it)"
    )]
    NotPrimary(String),
    /// The server answered and turned the login down (password, role,
    /// database): retrying will not help until someone fixes the settings.
    #[error("the database refused the connection: {0}")]
    LoginRefused(String),
    #[error(
        "the ledger schema is missing or incomplete in this database ({0}): run `effectwatch migrate`"
    )]
    SchemaMissing(String),
    /// The ledger lacks migrations of this binary: migrate applies them.
    #[error("{0}: run `effectwatch migrate`")]
    SchemaBehind(String),
    /// A newer effectwatch upgraded the ledger: this binary has nothing to
    /// apply, and may lack what the newer schema offers.
    #[error("{0}: upgrade effectwatch")]
    LedgerNewer(String),
    /// The ledger's migrations are not this binary's (an edited released
    /// migration, or one of another line): migrate cannot mend that.
    #[error(
        "{0}: `effectwatch migrate` cannot bring this ledger in line; use the effectwatch build that made it (a demo ledger starts over with `effectwatch demo --fresh`)"
    )]
    MigrationsDiffer(String),
    #[error("no effect with key {0}")]
    NotFound(String),
    #[error("{0}: nothing written; refresh and decide again")]
    Changed(String),
    #[error("{0}")]
    NotApplicable(String),
    #[error("refused: {0}")]
    Refused(String),
    #[error("{0}")]
    Invalid(String),
    #[error("database error: {0}")]
    Database(String),
}

impl LedgerError {
    /// Sorts a driver error by what the operator should do about it.
    pub fn from_sqlx(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::Database(db) => {
                let message = db.message().to_string();
                match db.code().as_deref() {
                    Some("EW404") => LedgerError::NotFound(strip_prefix(&message)),
                    Some("EW409") => LedgerError::Changed(strip_prefix(&message)),
                    Some("EW422") => LedgerError::NotApplicable(strip_prefix(&message)),
                    // A double booking, refused by the ledger's exclusion constraint.
                    Some("23P01") => LedgerError::NotApplicable(format!(
                        "{}: the time range overlaps another booking of the target",
                        strip_prefix(&message)
                    )),
                    // A table, schema, function or column the binary
                    // expects and the ledger lacks: a schema it has not
                    // been migrated to.
                    Some("42P01" | "3F000" | "42883" | "42703") => {
                        LedgerError::SchemaMissing(message)
                    }
                    Some("42501") => LedgerError::Refused(message),
                    Some("22023" | "23514" | "22P02" | "23502") => {
                        LedgerError::Invalid(strip_prefix(&message))
                    }
                    Some("28P01" | "28000" | "3D000") => LedgerError::LoginRefused(message),
                    // The server went away or stopped taking writes (shut
                    // down, crashed, starting, demoted to a standby): the
                    // call did not reach a primary, and may once one answers.
                    Some(code)
                        if code.starts_with("08")
                            || matches!(code, "25006" | "57P01" | "57P02" | "57P03") =>
                    {
                        LedgerError::NotPrimary(one_line(&message))
                    }
                    _ => LedgerError::Database(message),
                }
            }
            sqlx::Error::Configuration(inner) => LedgerError::BadUrl(inner.to_string()),
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Protocol(_) => LedgerError::Unreachable(one_line(&error.to_string())),
            _ => LedgerError::Database(one_line(&error.to_string())),
        }
    }

    /// Whether the failure is about reaching the server rather than what was asked.
    pub fn is_connection(&self) -> bool {
        matches!(
            self,
            LedgerError::Unreachable(_) | LedgerError::NotPrimary(_) | LedgerError::LoginRefused(_)
        )
    }

    /// Whether trying again later cannot succeed without a change of settings
    /// or schema: the console refuses to start on these rather than wait.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            LedgerError::LoginRefused(_)
                | LedgerError::BadUrl(_)
                | LedgerError::SchemaMissing(_)
                | LedgerError::SchemaBehind(_)
                | LedgerError::LedgerNewer(_)
                | LedgerError::MigrationsDiffer(_)
        )
    }

    /// The refusal of a migrate, saying it left the ledger as it was.
    pub fn nothing_changed(self) -> LedgerError {
        match self {
            LedgerError::LedgerNewer(what) => {
                LedgerError::LedgerNewer(format!("nothing changed: {what}"))
            }
            LedgerError::MigrationsDiffer(what) => {
                LedgerError::MigrationsDiffer(format!("nothing changed: {what}"))
            }
            other => other,
        }
    }
}

impl From<sqlx::Error> for LedgerError {
    fn from(error: sqlx::Error) -> Self {
        LedgerError::from_sqlx(error)
    }
}

fn strip_prefix(message: &str) -> String {
    message
        .strip_prefix("ledger: ")
        .unwrap_or(message)
        .to_string()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
