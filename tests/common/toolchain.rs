//! What the client suites share: running a toolchain's command, and whether
//! a toolchain is here at all. Where EFFECTWATCH_REQUIRE_CLIENTS=1 (CI, on a
//! machine that has it), a missing one fails the test instead of skipping it.

use std::process::{Command, Output};

/// Runs `command`, failing the test with its output when it fails.
pub fn run(what: &str, command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: could not start: {e}"));
    if !output.status.success() {
        panic!(
            "{what} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output
}

/// Whether every program answers `--version`. If one does not, says the
/// `client`'s suite is skipped, or fails where clients are required.
pub fn present(programs: &[&str], client: &str) -> bool {
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|program| {
            !Command::new(program)
                .arg("--version")
                .output()
                .is_ok_and(|found| found.status.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    let missing = missing.join(" and ");
    if std::env::var("EFFECTWATCH_REQUIRE_CLIENTS").as_deref() == Ok("1") {
        panic!(
            "{missing} missing and EFFECTWATCH_REQUIRE_CLIENTS=1: the {client} client must be tested"
        );
    }
    eprintln!("skipped: {missing} not installed, so the {client} client is not tested");
    false
}
