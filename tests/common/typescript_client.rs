//! The TypeScript client (`clients/typescript`) as a user gets it: `npm
//! pack`'s tarball, made from a copy of the sources under `target/` (what a
//! checkout holds: no node_modules, no dist — its prepare script installs
//! the compiler and builds dist/src there), installed into a clean project
//! under `target/`, made anew each run. tests/patroni.rs runs agents on
//! async tasks from it through a switchover; the client's own suite
//! (test/package.test.ts) installs the tarball the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::python_client::target_dir;
use super::toolchain::run;

/// A clean project `target/<name>/app` with the client installed from its
/// tarball (packed in `target/<name>`). Returns the project's folder.
pub fn packed_install(name: &str) -> PathBuf {
    let work = target_dir().join(name);
    if work.exists() {
        std::fs::remove_dir_all(&work).expect("removing the last install");
    }
    let source = work.join("source");
    copy_sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/typescript"),
        &source,
    );
    let packed = run(
        "npm pack of the TypeScript client",
        Command::new("npm")
            .args(["pack", "--json", "--loglevel=error", "--pack-destination"])
            .arg(&work)
            .current_dir(&source),
    );
    let stdout = String::from_utf8_lossy(&packed.stdout);
    // npm prints the prepare script's output before the JSON.
    let json = &stdout[stdout.find('[').expect("npm pack's JSON")..];
    let packed: serde_json::Value = serde_json::from_str(json).expect("npm pack's JSON");
    let tarball = work.join(
        packed[0]["filename"]
            .as_str()
            .expect("npm pack names its tarball"),
    );

    let app = work.join("app");
    std::fs::create_dir_all(&app).expect("creating the project");
    std::fs::write(
        app.join("package.json"),
        r#"{"name": "refund-agents", "private": true, "type": "module"}"#,
    )
    .expect("writing the project's package.json");
    run(
        "npm install of the TypeScript client's tarball",
        Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--prefer-offline",
                "--loglevel=error",
            ])
            .arg(&tarball)
            .current_dir(&app),
    );
    let installed = app.join("node_modules/effectwatch");
    assert!(
        installed.is_dir() && !installed.is_symlink(),
        "the tarball is installed, not linked"
    );
    app
}

/// The package's files without what an install or a build left beside them.
fn copy_sources(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("creating the pack copy");
    for entry in std::fs::read_dir(from).expect("reading the package") {
        let entry = entry.expect("reading the package");
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == "node_modules" || name == "dist" || name.ends_with(".tgz") {
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
