//! effectwatch: a terminal console over a PostgreSQL effect ledger.

pub mod adapters;
pub mod cli;
pub mod config;
pub mod connection;
pub mod console;
pub mod crash_point;
pub mod demo;
pub mod fakeprovider;
pub mod format;
pub mod gateway;
pub mod key_form;
pub mod ledger;
pub mod localpg;
pub mod logging;
pub mod reconciler;
pub mod settle;
pub mod text;
pub mod time_args;
