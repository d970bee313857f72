//! The TypeScript client's own suite (`clients/typescript`), run by the one
//! test command: its packages from the npm registry (`npm ci`, pinned by
//! package-lock.json), `tsc --strict` on the client, its tests and its
//! examples, then Node's test runner against a fresh ledger, and through a
//! real PgBouncer in transaction mode where the package is installed. The
//! suite drives the Vercel AI SDK's and the OpenAI Agents SDK's own tool
//! loops, runs every example as a program, and installs the package as a
//! user meets it (its README's `npm install ./clients/typescript` from a
//! fresh copy; `npm pack`'s tarball in a clean project with the
//! frameworks, whose examples run against a second fresh ledger). Any
//! failure fails this test. Without node and npm it says it is skipped —
//! unless EFFECTWATCH_REQUIRE_CLIENTS=1, where that is a failure.

mod common;

use std::path::Path;

use common::pgbouncer::PgBouncer;
use common::toolchain::{self, run};
use std::process::Command;

#[tokio::test]
async fn the_typescript_client_compiles_strict_and_passes_its_suite() {
    if !toolchain::present(&["node", "npm"], "TypeScript") {
        return;
    }
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/typescript");
    run(
        "installing the TypeScript client's packages (npm ci)",
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&package),
    );
    run(
        "tsc --strict on the TypeScript client and its tests",
        Command::new(package.join("node_modules/.bin/tsc"))
            .args(["-p", "."])
            .current_dir(&package),
    );

    let mut suites: Vec<_> = std::fs::read_dir(package.join("dist/test"))
        .expect("tsc wrote dist/test")
        .map(|entry| entry.expect("a test file").path())
        .filter(|path| path.to_string_lossy().ends_with(".test.js"))
        .collect();
    suites.sort();
    assert!(!suites.is_empty(), "tsc wrote no test file");

    let db = common::test_db().await;
    // The examples run once per ledger: the packaged ones get their own.
    let package_db = common::test_db().await;
    let bouncer = PgBouncer::start(&db.url);
    let mut node = Command::new("node");
    node.arg("--test")
        .args(&suites)
        .env("EFFECTWATCH_TEST_DATABASE_URL", &db.url)
        .env("EFFECTWATCH_TEST_PACKAGE_DATABASE_URL", &package_db.url)
        .current_dir(&package);
    if let Some(bouncer) = &bouncer {
        let database = db.url.rsplit('/').next().expect("a database name");
        node.env("EFFECTWATCH_TEST_PGBOUNCER_URL", bouncer.url(database));
    }
    let output = run("the TypeScript client's node --test suite", &mut node);
    // Only the PgBouncer tests may skip, and only where it is not installed.
    let expected_skips = if bouncer.is_some() {
        0
    } else {
        std::fs::read_to_string(package.join("test/pgbouncer.test.ts"))
            .expect("reading the PgBouncer tests")
            .matches("{ skip }")
            .count() as u32
    };
    let summary = String::from_utf8_lossy(&output.stdout);
    println!("{summary}");
    let count = |name: &str| {
        summary
            .lines()
            .find_map(|line| line.strip_prefix(&format!("# {name} ")))
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    assert!(
        count("pass").is_some_and(|n| n > 0)
            && count("fail") == Some(0)
            && count("skipped") == Some(expected_skips)
            && count("cancelled") == Some(0),
        "the TypeScript suite ran nothing, or skipped or failed part of it:\n{summary}"
    );
}
