//! The config file is checked whole before any command runs: a provider
//! or sink that cannot work is refused on load, not when first used.

use std::process::Output;

const BIN: &str = env!("CARGO_BIN_EXE_effectwatch");
/// Nothing listens here: a command that got as far as connecting would exit 4.
const NO_DATABASE: &str = "postgres://postgres@127.0.0.1:1/postgres";

fn effectwatch(config: &str, args: &[&str]) -> (Output, tempfile::NamedTempFile) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), config).unwrap();
    let output = std::process::Command::new(BIN)
        .arg("--config")
        .arg(file.path())
        .args(["--database-url", NO_DATABASE])
        .args(args)
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (output, file)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A literal Authorization header, an unknown placeholder and a sink with
/// no URL: three problems that used to surface only when used.
const BROKEN: &str = r#"
[providers.pay]
kind = "http"
base_url = "http://127.0.0.1:9"
headers.Authorization = "Bearer abc123"
[[providers.pay.lookup]]
path = "/v1/effects/{nosuch}"
[sinks.ops]
kind = "webhook"
"#;

#[test]
fn every_command_refuses_a_config_with_problems() {
    for args in [
        &["list", "overdue"][..],
        &["show", "k"],
        &["reconcile", "k"],
    ] {
        let (run, file) = effectwatch(BROKEN, args);
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(3), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        let expected = format!(
            "effectwatch: config {}: 3 problems: ",
            file.path().display()
        );
        assert!(stderr.starts_with(&expected), "{args:?}: {stderr}");
        for needle in [
            "provider pay: header Authorization looks like a credential",
            "provider pay: lookup[0]: unknown placeholder {nosuch}",
            "sink ops: set exactly one of url and url_env",
        ] {
            assert!(stderr.contains(needle), "{args:?}: {needle}: {stderr}");
        }
        assert!(!stderr.contains("abc123"), "{stderr}");
        assert!(run.stdout.is_empty(), "{args:?}: {}", text(&run.stdout));
    }
}

#[test]
fn the_config_command_lists_every_problem_on_its_own_line() {
    let (run, file) = effectwatch(BROKEN, &["config"]);
    assert_eq!(run.status.code(), Some(3), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    assert!(
        stdout.contains(&file.path().display().to_string()),
        "{stdout}"
    );
    let problems: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("  provider ") || line.starts_with("  sink "))
        .collect();
    assert_eq!(problems.len(), 3, "{stdout}");
}

#[test]
fn a_variable_for_a_header_is_read_when_used_not_on_load() {
    let config = r#"
[providers.pay]
kind = "http"
base_url = "http://127.0.0.1:9"
headers.Authorization = { env = "EFFECTWATCH_TEST_SURELY_UNSET", prefix = "Bearer " }
[[providers.pay.lookup]]
path = "/v1/effects/{external_ref}"
"#;
    let (run, _file) = effectwatch(config, &["config"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
}
