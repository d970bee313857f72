//! effectwatch: a terminal console over a PostgreSQL effect ledger.

pub mod adapters;
pub mod cli;
pub mod config;
pub mod console;
pub mod crash_point;
pub mod demo;
pub mod fakeprovider;
pub mod gateway;
pub mod key_form;
pub mod localpg;
pub mod logging;
pub mod reconciler;
pub mod settle;
pub mod text;
pub mod time_args;

// The ledger crate, under the names the rest of effectwatch knows it by.
pub use effectwatch_ledger as ledger;
pub use effectwatch_ledger::{connection, format};
