//! A real PgBouncer in transaction pooling mode, in front of a test's server.
//!
//! Started from the distribution's package (`pgbouncer`), on a free port of
//! 127.0.0.1, with a folder of its own; stopped when dropped. Where the
//! package is not installed the caller is told so, and says it is skipped.
//! PgBouncer refuses to run as root: as root it runs as the `postgres` user,
//! like the test servers.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PgBouncer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// PgBouncer in front of the server `server_url` points at, passing any
    /// database name through with the server URL's user and password.
    /// None, said on stderr, where PgBouncer is not installed.
    pub fn start(server_url: &str) -> Option<PgBouncer> {
        Self::start_with(server_url, "")
    }

    /// As [`start`](Self::start), with more `[pgbouncer]` settings.
    pub fn start_with(server_url: &str, settings: &str) -> Option<PgBouncer> {
        let Some(binary) = find_binary() else {
            // CI installs the package and sets this: there, a skip would hide a gap.
            assert!(
                std::env::var_os("EFFECTWATCH_REQUIRE_PGBOUNCER").is_none(),
                "EFFECTWATCH_REQUIRE_PGBOUNCER is set and the pgbouncer package is not installed"
            );
            eprintln!(
                "skipped: this test runs agents through PgBouncer, and the pgbouncer package is not installed"
            );
            return None;
        };
        let server = reqwest::Url::parse(server_url).expect("the test server's URL");
        let host = server.host_str().unwrap_or("127.0.0.1").to_string();
        let server_port = server.port().unwrap_or(5432);
        let mut login = format!("user={}", server.username());
        if let Some(password) = server.password() {
            login.push_str(&format!(" password={password}"));
        }
        let dir = tempfile::Builder::new()
            .prefix("ewbouncer-")
            .tempdir()
            .unwrap();
        let port = free_port();
        let config = format!(
            "[databases]\n\
             * = host={host} port={server_port} {login}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = any\n\
             pool_mode = transaction\n\
             max_client_conn = 400\n\
             default_pool_size = 8\n\
             server_reset_query =\n\
             logfile = {log}\n\
             pidfile = {pid}\n\
             {settings}\n",
            log = dir.path().join("pgbouncer.log").display(),
            pid = dir.path().join("pgbouncer.pid").display(),
        );
        let config_path = dir.path().join("pgbouncer.ini");
        std::fs::write(&config_path, config).unwrap();
        let mut command = Command::new(binary);
        command
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = server_user_when_root() {
            for path in [dir.path(), config_path.as_path()] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
            }
            command.uid(uid).gid(gid);
        }
        let child = command.spawn().expect("starting pgbouncer");
        let bouncer = PgBouncer { child, port, dir };
        bouncer.wait_until_listening();
        Some(bouncer)
    }

    /// A URL to `database` through PgBouncer.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn wait_until_listening(&self) {
        let started = Instant::now();
        while TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "pgbouncer did not listen within 10 s: {}",
                std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("pgbouncer"))
        .find(|candidate| Path::new(candidate).is_file())
}

fn server_user_when_root() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("postgres").ok()??;
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port on 127.0.0.1")
}
