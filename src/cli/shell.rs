//! `effectwatch completions SHELL` and `effectwatch man`: generated from
//! the same clap definitions the command line parses, so they never drift
//! from it. Neither reads the config nor touches a database.

use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;
use super::exit::{FAILURE, Failure};
use super::report::write_output;

/// The binary's name as the shell sees it.
const BIN: &str = "effectwatch";

/// The completion script for `shell`, on stdout
/// (e.g. `effectwatch completions bash > /etc/bash_completion.d/effectwatch`).
pub fn completions(shell: Shell) -> Result<(), Failure> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, BIN, &mut script);
    write_output(None, &script)
}

/// The manual page (roff) on stdout, or with `dir` one page per
/// subcommand written there (effectwatch.1, effectwatch-list.1, …).
pub fn man(dir: Option<PathBuf>) -> Result<(), Failure> {
    let command = Cli::command();
    match dir {
        Some(dir) => clap_mangen::generate_to(command, &dir).map_err(|error| {
            Failure::new(
                FAILURE,
                format!(
                    "cannot write the manual pages to {}: {error}",
                    dir.display()
                ),
            )
        }),
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .map_err(|error| {
                    Failure::new(FAILURE, format!("cannot render the manual page: {error}"))
                })?;
            write_output(None, &page)
        }
    }
}
