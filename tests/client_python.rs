//! The Python client's own suite (`clients/python`), run by the one test
//! command: a virtual environment under `target/`, the package and its test
//! extras from the package registry, a fresh ledger, then `mypy --strict`
//! and pytest. Any failure fails this test. Without python3 it says it is
//! skipped — unless EFFECTWATCH_REQUIRE_CLIENTS=1, where that is a failure.

mod common;

use common::pgbouncer::PgBouncer;
use common::toolchain::{self, run};

use std::path::{Path, PathBuf};
use std::process::Command;

fn database_of(url: &str) -> &str {
    let path = url.rsplit_once('/').map_or(url, |(_, database)| database);
    path.split('?').next().unwrap_or(path)
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

#[tokio::test]
async fn the_python_client_passes_mypy_strict_and_its_suite() {
    if !toolchain::present(&["python3"], "Python") {
        return;
    }
    let python = PathBuf::from("python3");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let package = root.join("clients/python");
    let target = target_dir(root);
    let venv = target.join("client-python-venv");
    if !venv.join("bin/python").exists() {
        run(
            "creating the virtual environment",
            Command::new(&python).args(["-m", "venv"]).arg(&venv),
        );
    }
    let venv_python = venv.join("bin/python");
    run(
        "installing the Python client with its test extras",
        Command::new(&venv_python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--editable",
            ])
            .arg(format!("{}[test]", package.display())),
    );
    run(
        "mypy --strict on the Python client, its tests, examples and bench",
        Command::new(&venv_python)
            .args(["-m", "mypy", "--strict", "--cache-dir"])
            .arg(target.join("client-python-mypy-cache"))
            .args(["src", "tests", "examples", "bench"])
            .current_dir(&package),
    );

    let db = common::test_db().await;
    let mut pytest = Command::new(&venv_python);
    pytest
        .args([
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "tests",
        ])
        .env("EFFECTWATCH_TEST_DATABASE_URL", &db.url)
        .env("EFFECTWATCH_BIN", env!("CARGO_BIN_EXE_effectwatch"))
        .current_dir(&package);
    // Says on stderr that the pooler tests are left out where PgBouncer is
    // not installed (and fails instead where CI requires it).
    let bouncer = PgBouncer::start(&db.url);
    match &bouncer {
        Some(bouncer) => {
            pytest.env(
                "EFFECTWATCH_TEST_PGBOUNCER_URL",
                bouncer.url(database_of(&db.url)),
            );
        }
        None => {
            pytest.args(["-k", "not pgbouncer"]);
        }
    }
    let output = run("the Python client's pytest suite", &mut pytest);
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    // pytest's last line counts what ran: "N passed in …", and nothing
    // skipped, deselected by accident, failed or in error.
    let summary = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("");
    assert!(
        summary.contains(" passed in ")
            && ["skipped", "failed", "error", "xfail"]
                .iter()
                .all(|word| !summary.contains(word)),
        "the Python suite ran nothing, or not all of it: {summary}"
    );
}
