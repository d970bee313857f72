//! The demo, headless, on a cluster of its own: its agents fill every pane,
//! and when it stops, its PostgreSQL and its provider are gone.

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

#[test]
fn the_headless_demo_fills_every_pane_and_leaves_nothing_running() {
    let dir = tempfile::Builder::new()
        .prefix("ew-demo-")
        .tempdir_in("/tmp")
        .expect("a temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .args([
            "demo",
            "--headless",
            "--duration",
            "10s",
            "--pending-window",
            "1s",
            "--rate",
            "8",
            "--seed",
            "3",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("cluster"))
        .env_remove("DATABASE_URL")
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "demo failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let summary: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    for pane in summary["panes"].as_array().expect("panes") {
        assert!(
            pane["items"].as_i64().unwrap() > 0,
            "empty pane {pane} after 10 s: {stdout}"
        );
    }
    let port = summary["cluster_port"]
        .as_u64()
        .expect("the demo ran its own cluster");
    assert!(
        TcpStream::connect_timeout(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_millis(500)
        )
        .is_err(),
        "the demo's PostgreSQL still accepts connections on {port}"
    );
    let provider = summary["provider_url"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    assert!(
        TcpStream::connect_timeout(&provider.parse().unwrap(), Duration::from_millis(500)).is_err(),
        "the fake provider still listens on {provider}"
    );
    assert!(
        !dir.path().join("cluster/data/postmaster.pid").exists(),
        "the server did not shut down"
    );
}
