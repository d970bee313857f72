//! Exit codes a script can tell apart.

use std::process::ExitCode;

use crate::ledger::LedgerError;

pub const FAILURE: u8 = 1;
pub const USAGE: u8 = 2;
pub const BAD_CONFIG: u8 = 3;
pub const UNREACHABLE: u8 = 4;
pub const SCHEMA_MISSING: u8 = 5;
pub const NOT_FOUND: u8 = 6;
pub const CHANGED: u8 = 7;
pub const REFUSED: u8 = 8;
pub const NOT_APPLICABLE: u8 = 9;
/// The ledger's schema is newer than this binary's: upgrade effectwatch.
pub const LEDGER_NEWER: u8 = 10;
/// The ledger's migrations are not this binary's (an edited released
/// migration): migrate cannot mend it.
pub const MIGRATIONS_DIFFER: u8 = 11;

pub fn code_for(error: &LedgerError) -> u8 {
    match error {
        LedgerError::BadUrl(_) => BAD_CONFIG,
        LedgerError::Unreachable(_) | LedgerError::NotPrimary(_) | LedgerError::LoginRefused(_) => {
            UNREACHABLE
        }
        LedgerError::SchemaMissing(_) | LedgerError::SchemaBehind(_) => SCHEMA_MISSING,
        LedgerError::LedgerNewer(_) => LEDGER_NEWER,
        LedgerError::MigrationsDiffer(_) => MIGRATIONS_DIFFER,
        LedgerError::NotFound(_) => NOT_FOUND,
        LedgerError::Changed(_) => CHANGED,
        LedgerError::Refused(_) => REFUSED,
        LedgerError::NotApplicable(_) | LedgerError::Invalid(_) => NOT_APPLICABLE,
        LedgerError::Database(_) => FAILURE,
    }
}

/// A failure to report on stderr as one line, with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code,
        }
    }

    /// Only the exit code: the command has already said everything, where
    /// its reader looks for it (check's verdict is on stdout).
    pub fn already_said(code: u8) -> Self {
        Failure::new(code, "")
    }

    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

impl From<LedgerError> for Failure {
    fn from(error: LedgerError) -> Self {
        Failure {
            code: code_for(&error),
            message: error.to_string(),
        }
    }
}
