//! The effect ledger as seen from Rust: connection, model, writer API,
//! panes, operator actions and audit. No terminal code lives here.

pub mod actions;
pub mod approvals;
pub mod audit;
pub mod channel;
pub mod check;
pub mod compensation;
pub mod connect;
pub mod durability;
pub mod error;
pub mod escalations;
pub mod finance;
pub mod history;
pub mod json;
pub mod migrate;
pub mod model;
pub mod panes;
pub mod policies;
pub mod pool;
pub mod reconciler;
pub mod report;
pub mod retention;
pub mod snapshot;
pub mod timetravel;
pub mod writer;

pub use connect::{ConnectSettings, connect, connect_lazy};
pub use error::LedgerError;
pub use model::{Decision, Effect, State};
pub use pool::{LedgerPool, LedgerTransaction, Pooler};

pub use channel::NOTIFY_CHANNEL;
