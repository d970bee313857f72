//! The effect ledger as seen from Rust: its model, writer API, panes,
//! operator actions and audit, over the connection `crate::connection`
//! makes. No terminal code lives here.

pub mod actions;
pub mod approvals;
pub mod audit;
pub mod channel;
pub mod compensation;
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
