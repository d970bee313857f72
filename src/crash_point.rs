//! Named points between two steps of a settling flow where a test can make
//! the process die as a crash would: no unwinding, no destructors, nothing
//! flushed. `EFFECTWATCH_CRASH_AT=<name>` chooses one; unset (always, in
//! production) each point costs one comparison. The tests kill a
//! reconciler or a settling command at every point and prove that a fresh
//! one finishes the flow without repeating an effect.

use std::sync::OnceLock;

/// The environment variable that names the point to die at.
pub const CRASH_AT: &str = "EFFECTWATCH_CRASH_AT";

/// Dies here if this is the chosen point.
pub fn crash_point(name: &'static str) {
    static CHOSEN: OnceLock<Option<String>> = OnceLock::new();
    let chosen = CHOSEN.get_or_init(|| std::env::var(CRASH_AT).ok());
    if chosen.as_deref() == Some(name) {
        eprintln!("effectwatch: dying at crash point {name}, as asked by {CRASH_AT}");
        std::process::abort();
    }
}
