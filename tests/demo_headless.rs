//! The demo, headless, on a cluster of its own: its agents fill every pane,
//! and when it stops, its PostgreSQL and its provider are gone.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

fn accepts_connections(port: u16) -> bool {
    TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_millis(500),
    )
    .is_ok()
}

/// The demo's server, as `postmaster.pid` names it (pid on line 1, port on 4).
struct Server {
    pid: i32,
    port: u16,
}

impl Server {
    /// Asserts that the server stopped, and stops it if it did not, so that a
    /// failing test does not leave it running.
    fn assert_stopped(&self, what: &str) {
        let running = accepts_connections(self.port);
        if running {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGINT,
            );
        }
        assert!(
            !running,
            "{what}: PostgreSQL still accepts connections on {}",
            self.port
        );
    }
}

/// Starts a long headless demo on `cluster` and returns it once it printed its
/// first progress line, with its server and the rest of its stderr, which a
/// thread keeps draining.
fn start_long_demo(cluster: &Path) -> (Child, Server, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .args(["demo", "--headless", "--duration", "60s", "--rate", "4"])
        .arg("--data-dir")
        .arg(cluster)
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the demo starts");
    let (lines, stderr) = mpsc::channel();
    let reader = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in reader.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut seen = Vec::new();
    loop {
        match stderr.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.starts_with("sim:") => break,
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!("no progress line from the demo: {seen:?}");
            }
        }
    }
    let pid_file = std::fs::read_to_string(cluster.join("data/postmaster.pid"))
        .expect("the demo's server is running");
    let line = |n: usize| pid_file.lines().nth(n).map(str::trim).unwrap_or_default();
    let server = Server {
        pid: line(0).parse().expect("a pid in postmaster.pid"),
        port: line(3).parse().expect("a port in postmaster.pid"),
    };
    assert!(
        accepts_connections(server.port),
        "the server is not on port {}",
        server.port
    );
    (child, server, stderr)
}

fn wait_for_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > within {
            let _ = child.kill();
            panic!("the demo did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal)
        .expect("the signal is sent");
}

#[test]
fn sigterm_ends_the_headless_demo_and_stops_its_server() {
    let dir = tempfile::Builder::new()
        .prefix("ew-demo-")
        .tempdir_in("/tmp")
        .expect("a temp dir");
    let cluster = dir.path().join("cluster");
    let (mut child, server, stderr) = start_long_demo(&cluster);
    let operator_config =
        std::env::temp_dir().join(format!("effectwatch-demo-operator-{}.toml", child.id()));
    assert!(operator_config.exists(), "no second operator's config");
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let status = wait_for_exit(&mut child, Duration::from_secs(10));
    let stderr: Vec<String> = stderr.try_iter().collect();
    server.assert_stopped("after SIGTERM");
    assert!(status.success(), "{status}: {stderr:?}");
    assert!(
        !cluster.join("data/postmaster.pid").exists(),
        "the server did not shut down"
    );
    assert!(
        !operator_config.exists(),
        "the second operator's config was left behind"
    );
}

#[test]
fn a_killed_demo_does_not_leave_its_server_running() {
    let dir = tempfile::Builder::new()
        .prefix("ew-demo-")
        .tempdir_in("/tmp")
        .expect("a temp dir");
    let cluster = dir.path().join("cluster");
    let (mut child, server, _stderr) = start_long_demo(&cluster);
    let operator_config =
        std::env::temp_dir().join(format!("effectwatch-demo-operator-{}.toml", child.id()));
    signal(&child, nix::sys::signal::Signal::SIGKILL);
    wait_for_exit(&mut child, Duration::from_secs(5));
    let _ = std::fs::remove_file(operator_config);
    // The watchdog stops the server once the demo is gone.
    let started = Instant::now();
    while accepts_connections(server.port) && started.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200));
    }
    server.assert_stopped("after SIGKILL");
}

#[test]
fn fresh_refuses_to_remove_a_folder_that_is_not_a_demo_cluster() {
    let dir = tempfile::Builder::new()
        .prefix("ew-demo-")
        .tempdir_in("/tmp")
        .expect("a temp dir");
    let precious = dir.path().join("notes.txt");
    std::fs::write(&precious, "not a cluster").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .args(["demo", "--headless", "--fresh", "--duration", "1s"])
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("DATABASE_URL")
        .output()
        .expect("the demo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "--fresh went ahead: {stderr}");
    assert!(stderr.contains("refusing to remove"), "{stderr}");
    assert!(precious.exists(), "--fresh removed an unrelated folder");
}
