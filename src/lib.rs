//! effectwatch: a terminal console over a PostgreSQL effect ledger.

pub mod cli;
pub mod format;
pub mod ledger;
pub mod localpg;
pub mod text;
