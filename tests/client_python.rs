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

/// What the wheel is built from: the package's sources, without what a
/// build or a run left beside them.
fn copy_sources(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("creating the build copy");
    for entry in std::fs::read_dir(from).expect("reading the package") {
        let entry = entry.expect("reading the package");
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == "__pycache__" || name.ends_with(".egg-info") || name == "build" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_sources(&path, &to.join(&*name));
        } else {
            std::fs::copy(&path, to.join(&*name)).expect("copying the package");
        }
    }
}

/// The package's wheel, built from a copy of `package` under `work`.
fn build_wheel(python: &Path, package: &Path, work: &Path) -> PathBuf {
    if work.exists() {
        std::fs::remove_dir_all(work).expect("removing the last build");
    }
    let source = work.join("source");
    for part in ["pyproject.toml", "README.md"] {
        std::fs::create_dir_all(&source).expect("creating the build copy");
        std::fs::copy(package.join(part), source.join(part)).expect("copying the package");
    }
    copy_sources(&package.join("src"), &source.join("src"));
    let dist = work.join("dist");
    run(
        "building the Python client's wheel",
        Command::new(python)
            .args([
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--wheel-dir",
            ])
            .arg(&dist)
            .arg(&source),
    );
    let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
        .expect("reading the built wheels")
        .map(|entry| entry.expect("reading the built wheels").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "one wheel built: {wheels:?}");
    wheels.into_iter().next().expect("one wheel")
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
    run(
        "creating a clean virtual environment",
        Command::new(&python)
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
    );
    let venv_python = venv.join("bin/python");
    let wheel = build_wheel(&venv_python, &package, &target.join("client-python-wheel"));
    run(
        "installing the Python client's wheel with its test and framework extras",
        Command::new(&venv_python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(format!(
                "{}[test,langchain,openai-agents,pydantic-ai]",
                wheel.display()
            )),
    );
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
        "mypy --strict on the Python client, its tests, examples and bench",
        Command::new(&venv_python)
            .args(["-m", "mypy", "--strict", "--cache-dir"])
            .arg(target.join("client-python-mypy-cache"))
            .args(["src", "tests", "examples", "bench"])
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
    assert!(
        summary.contains(" passed in ")
            && ["skipped", "failed", "error", "xfail"]
                .iter()
                .all(|word| !summary.contains(word)),
        "the Python suite ran nothing, or not all of it: {summary}"
    );
}
