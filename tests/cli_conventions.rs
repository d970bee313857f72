//! The command line's conventions, run through the real binary: help that
//! shows each subcommand only what means something to it, and completion
//! scripts and manual pages generated from the same definitions.

mod common;

use std::process::Output;

use common::effectwatch_cli as effectwatch;

fn stdout(output: &Output) -> String {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

const CONSOLE_ONLY: [&str; 4] = ["--theme", "--poll-interval", "--no-notify", "--at"];

#[test]
fn flags_only_the_console_reads_stay_out_of_the_other_subcommands_help() {
    for subcommand in ["report", "check", "show", "migrate", "resolve", "policy"] {
        let help = stdout(&effectwatch(&[subcommand, "--help"]));
        for flag in CONSOLE_ONLY {
            assert!(
                !help.contains(flag),
                "`{subcommand} --help` offers {flag}:\n{help}"
            );
        }
        // What every subcommand does take is still there.
        assert!(help.contains("--database-url"), "{help}");
    }
    for console in [vec!["--help"], vec!["watch", "--help"]] {
        let help = stdout(&effectwatch(&console));
        for flag in CONSOLE_ONLY {
            assert!(help.contains(flag), "{console:?} lacks {flag}:\n{help}");
        }
    }
    // Time travel is also for list and finance, and only that of the four.
    for reader in ["list", "finance"] {
        let help = stdout(&effectwatch(&[reader, "--help"]));
        assert!(help.contains("--at <TIME>"), "{help}");
        assert!(!help.contains("--theme"), "{help}");
    }
    let demo = stdout(&effectwatch(&["demo", "--help"]));
    assert!(
        demo.contains("--theme") && demo.contains("--no-notify"),
        "{demo}"
    );
    assert!(!demo.contains("--at"), "{demo}");
}

#[test]
fn a_console_flag_given_to_another_subcommand_is_refused_by_name() {
    let refused = effectwatch(&["show", "KEY", "--theme", "light"]);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("unexpected argument '--theme'"), "{said}");
}

#[test]
fn completion_scripts_come_from_the_command_line_for_each_shell() {
    let bash = stdout(&effectwatch(&["completions", "bash"]));
    assert!(bash.contains("_effectwatch()"), "{bash}");
    let zsh = stdout(&effectwatch(&["completions", "zsh"]));
    assert!(zsh.starts_with("#compdef effectwatch"), "{zsh}");
    let fish = stdout(&effectwatch(&["completions", "fish"]));
    assert!(fish.contains("complete -c effectwatch"), "{fish}");
    for script in [&bash, &zsh, &fish] {
        // Subcommands and flags as they are defined today, not a kept copy.
        for word in ["reconcile", "acknowledge-duplicates", "crit-unknown"] {
            assert!(script.contains(word), "no {word} in\n{script}");
        }
    }
    let unknown = effectwatch(&["completions", "tcsh"]);
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn the_manual_page_comes_from_the_command_line_and_needs_no_config() {
    // A config that cannot be read stops every command that uses it; not these.
    let home = tempfile::tempdir().unwrap();
    let broken = home.path().join("broken.toml");
    std::fs::write(&broken, "this is = = not toml").unwrap();
    let page = stdout(&effectwatch(&["man", "--config", broken.to_str().unwrap()]));
    assert!(page.contains(".TH effectwatch 1"), "{page}");
    assert!(page.contains("SUBCOMMANDS"), "{page}");
    assert!(page.contains("reconcile"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    stdout(&effectwatch(&[
        "man",
        "--dir",
        dir.path().to_str().unwrap(),
    ]));
    let check = std::fs::read_to_string(dir.path().join("effectwatch-check.1")).unwrap();
    assert!(check.contains("crit\\-unknown"), "{check}");
    assert!(dir.path().join("effectwatch-list.1").exists());
    assert!(dir.path().join("effectwatch.1").exists());
}

/// Every subcommand says what it does in its own words: the verbs whose
/// subcommands are made from one table each keep their own line in the
/// help, at the top or under `escalation`.
#[test]
fn each_subcommand_has_its_own_line_in_the_help() {
    use effectwatch::settle::verbs::{On, VERBS};
    let top = stdout(&effectwatch(&["--help"]));
    let escalation = stdout(&effectwatch(&["escalation", "--help"]));
    for verb in VERBS {
        let help = match verb.on {
            On::Effect => &top,
            On::Escalation => &escalation,
        };
        let line = help
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{} ", verb.name)))
            .unwrap_or_else(|| panic!("no line for {verb:?} in\n{help}"));
        let opening: String = verb.about.chars().take(30).collect();
        assert!(line.contains(&opening), "{verb:?}: {line}");
    }
    let release = stdout(&effectwatch(&["release", "--help"]));
    assert!(!release.starts_with("Every item of"), "{release}");
    assert!(
        release.contains("--pane") && release.contains("--note"),
        "{release}"
    );
    // A verb's fields are its arguments: resolve's outcome, escalate's sink,
    // reverse-duplicate's record; one that acts on a key alone has no --pane.
    let resolve = stdout(&effectwatch(&["resolve", "--help"]));
    for argument in [
        "--succeeded <EXTERNAL_REF>",
        "--failed",
        "--retryable",
        "--expect-version",
    ] {
        assert!(resolve.contains(argument), "{argument}: {resolve}");
    }
    assert!(!resolve.contains("--pane"), "{resolve}");
    assert!(stdout(&effectwatch(&["escalate", "--help"])).contains("--to <NAME>"));
    assert!(stdout(&effectwatch(&["reverse-duplicate", "--help"])).contains("--ref <REF>"));
    // An escalation verb takes one key or every open escalation.
    let close = stdout(&effectwatch(&["escalation", "resolve", "--help"]));
    assert!(
        close.contains("ESCALATION_KEY|--pane")
            && close.contains("escalations: every open escalation")
            && !close.contains("--expect-version"),
        "{close}"
    );
    let neither = effectwatch(&["resolve", "k", "--reason", "r"]);
    assert!(
        !neither.status.success(),
        "resolve without an outcome is refused"
    );
}
