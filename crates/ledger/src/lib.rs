//! The effect ledger as seen from Rust: its model, writer API, panes,
//! operator actions and audit, over the connection `connection` makes.
//! The only crate of effectwatch that speaks SQL: every query, and the
//! schema it installs (`sql/`), is here; the console, the CLI, the
//! gateway and the reconciler call these functions.

pub mod actions;
pub mod approvals;
pub mod audit;
pub mod certification;
pub mod channel;
pub mod compensation;
pub mod connection;
pub mod durability;
pub mod error;
pub mod escalations;
pub mod finance;
pub mod format;
pub mod health;
pub mod history;
pub mod incident;
pub mod json;
pub mod migrate;
pub mod model;
pub mod panes;
pub mod policies;
pub mod reconciler;
pub mod retention;
pub mod snapshot;
pub mod writer;

pub use crate::connection::{
    ConnectSettings, LedgerPool, LedgerTransaction, Pooler, connect, connect_lazy,
};
pub use error::LedgerError;
pub use model::{Decision, Effect, State};

pub use channel::NOTIFY_CHANNEL;
