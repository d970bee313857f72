//! The live console: state and update (`app`), the action table, table
//! models, views and theme. The runtime (`run`) owns the terminal and the
//! background tasks; everything else is pure and tested without them.

pub mod action;
pub mod app;
pub mod clipboard;
pub mod model;
pub mod notify;
pub mod poller;
pub mod run;
pub mod theme;
pub mod view;
pub mod views;
