//! The Python client's own suite (`clients/python`), run by the one test
//! command. The package meets the suite the way it meets a user: its wheel
//! is built (from a copy of the sources under `target/`, so the tree gets no
//! `build/` or `egg-info`) and installed with its test and agent-framework
//! extras into a virtual environment under `target/` made anew each run;
//! then a fresh ledger, `mypy --strict` and pytest, with no bytecode written
//! into the tree. Any failure fails this test, and so does any test skipped.
//! Without python3 it says it is skipped — unless
//! EFFECTWATCH_REQUIRE_CLIENTS=1, where that is a failure.

mod common;

use common::pgbouncer::PgBouncer;
use common::python_client;
use common::toolchain::{self, run};

use std::path::{Path, PathBuf};
use std::process::Command;

fn database_of(url: &str) -> &str {
    let path = url.rsplit_once('/').map_or(url, |(_, database)| database);
    path.split('?').next().unwrap_or(path)
}

#[tokio::test]
async fn the_python_client_passes_mypy_strict_and_its_suite() {
    if !toolchain::present(&["python3"], "Python") {
        return;
    }
    let python = PathBuf::from("python3");
    let package = python_client::package_dir();
    let target = python_client::target_dir();
    let venv = python_client::fresh_venv(
        &python,
        "client-python",
        "test,langchain,openai-agents,pydantic-ai",
    );
    let venv_python = venv.join("bin/python");
    // The suite imports the installed package, never the source tree.
    let installed = run(
        "finding the installed package",
        Command::new(&venv_python)
            .args(["-c", "import effectwatch; print(effectwatch.__file__)"])
            .current_dir(&package),
    );
    let installed = String::from_utf8_lossy(&installed.stdout);
    assert!(
        Path::new(installed.trim()).starts_with(&venv),
        "the suite would import effectwatch from {installed}, not from the installed wheel"
    );
    run(
        "mypy --strict on the Python client, its tests, examples, bench and tools",
        Command::new(&venv_python)
            .args(["-m", "mypy", "--strict", "--cache-dir"])
            .arg(target.join("client-python-mypy-cache"))
            .args(["src", "tests", "examples", "bench", "tools"])
            .env("PYTHONDONTWRITEBYTECODE", "1")
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
        .env("PYTHONDONTWRITEBYTECODE", "1")
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
    // Without PgBouncer its tests are deselected on purpose: "N passed,
    // 3 deselected in …".
    let ran_all = summary.contains(" passed in ")
        || (bouncer.is_none()
            && summary.contains(" passed, ")
            && summary.contains(" deselected in "));
    assert!(
        ran_all
            && ["skipped", "failed", "error", "xfail"]
                .iter()
                .all(|word| !summary.contains(word)),
        "the Python suite ran nothing, or not all of it: {summary}"
    );
}
