//! The Python client (`clients/python`) as a user gets it: its wheel built
//! from a copy of the sources under `target/` (so the tree gets no `build/`
//! or `egg-info`) and installed into a virtual environment under `target/`,
//! made anew each run. tests/client_python.rs runs the client's suite from
//! it; tests/patroni.rs runs agents on threads through a switchover.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::toolchain::run;

/// Where builds and virtual environments go: `CARGO_TARGET_DIR`, else
/// `target/` in the checkout.
pub fn target_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// The package's folder in the checkout.
pub fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python")
}

/// A clean virtual environment `target/<name>-venv` with the client's wheel
/// (built in `target/<name>-wheel`) installed, with `extras` (`test,langchain`;
/// empty: none). Returns the environment's folder.
pub fn fresh_venv(python: &Path, name: &str, extras: &str) -> PathBuf {
    let target = target_dir();
    let venv = target.join(format!("{name}-venv"));
    run(
        "creating a clean virtual environment",
        Command::new(python)
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
    );
    let venv_python = venv.join("bin/python");
    let wheel = build_wheel(
        &venv_python,
        &package_dir(),
        &target.join(format!("{name}-wheel")),
    );
    let (what, requirement) = if extras.is_empty() {
        (
            "installing the Python client's wheel".to_string(),
            wheel.display().to_string(),
        )
    } else {
        (
            format!("installing the Python client's wheel with its {extras} extras"),
            format!("{}[{extras}]", wheel.display()),
        )
    };
    run(
        &what,
        Command::new(&venv_python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(requirement),
    );
    venv
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
