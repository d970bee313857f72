//! A private, throwaway PostgreSQL cluster run from the server binaries installed on the machine.
//!
//! Why this exists: effectwatch is a console over a PostgreSQL ledger, and both its demo and its
//! test suite need a real server. Asking people to provision one (or to install Docker) before
//! they can try the tool or run `cargo test` is the main obstacle to using it, while the
//! `postgresql` package is everywhere and its `initdb`/`pg_ctl` can build and run a cluster in
//! about a second. So we run our own cluster: it never touches the system's server, its
//! configuration or its users, and it goes away with us.
//!
//! Design choices, and why:
//! - The binaries are taken from `/usr/lib/postgresql/<version>/bin` (highest version) before
//!   `PATH`, because Debian-style installs keep the server binaries off `PATH` and put wrappers
//!   there that would operate on the system clusters instead of ours.
//! - PostgreSQL refuses to run as root. When we are root (containers, CI) the binaries run as the
//!   `postgres` user, switched with the uid/gid of [`std::process::Command`] rather than through
//!   `sudo`/`runuser`, which minimal images may lack; the cluster folder is handed to that user
//!   because the server insists on owning its data directory.
//! - Authentication is `trust` and the server listens on 127.0.0.1 only: the cluster is a private
//!   scratch server, and passwords would only add configuration for the tools connecting to it.
//! - The port is picked by asking the kernel for a free one; another process can take it between
//!   our probe and the server's bind, so startup is retried on a fresh port when the bind fails.
//! - The Unix socket lives inside the cluster folder (never `/var/run/postgresql`, which belongs to
//!   the system server and is not writable for us); a socket path is limited to 107 bytes, so when
//!   the folder's path is too long the socket is disabled rather than failing — we connect over
//!   TCP anyway.
//! - Messages and the cluster locale are pinned (`C`/`C.UTF-8`) so failures can be recognised in
//!   the log (e.g. "Address already in use") and text ordering does not depend on the caller's
//!   environment.
//! - `max_connections` is raised because tests share one cluster per process and run in
//!   parallel, each with its own pool.
//! - `fast_unsafe` is for test runs, where a crash loses nothing of value: durability is turned
//!   off, and a temporary cluster goes to `/dev/shm` when it has room, because on disk `initdb`
//!   takes ~1.3 s and each `CREATE DATABASE` ~0.3 s, against ~0.5 s and ~0.05 s in memory. WAL is
//!   capped so that a long test run does not pile gigabytes of it up in memory.
//! - A cluster kept in a `static` is never dropped, so [`LocalCluster::stop_when_process_exits`]
//!   leaves a small detached shell watchdog behind; it learns of our exit through a pipe whose
//!   write end only we hold (the kernel closes it however we die, even on SIGKILL), then stops
//!   the server by signal (`pg_ctl` refuses to run as root) and removes the temporary folder.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::Mutex;

use nix::unistd::{Gid, Uid, User};

/// How many times startup is retried on a fresh port when the picked one was taken meanwhile.
const PORT_ATTEMPTS: usize = 5;
/// Longest Unix socket path the kernel accepts (`sun_path` is 108 bytes including the NUL).
const MAX_SOCKET_PATH: usize = 107;
/// How many lines of the server log an error message carries.
const LOG_TAIL_LINES: usize = 25;
/// Free space a memory-backed folder needs before a throwaway test cluster is put there.
const MIN_MEMORY_DIR_BYTES: u64 = 2 << 30;
/// Seconds `pg_ctl` waits for the server to start or stop.
const PG_CTL_TIMEOUT_SECS: &str = "60";

/// How to run a [`LocalCluster`].
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// `None`: a fresh temporary folder, removed when the cluster stops. `Some`: a folder that is
    /// kept; it holds the data directory, the server log and the socket, and a cluster already
    /// initialised there is started again with its data (the demo resumes).
    pub data_dir: Option<PathBuf>,
    /// `None`: pick a free port.
    pub port: Option<u16>,
    /// Trade durability for speed (`fsync=off` and friends): for tests only.
    pub fast_unsafe: bool,
}

/// Why a [`LocalCluster`] could not be started or stopped.
#[derive(thiserror::Error, Debug)]
pub enum LocalPgError {
    #[error(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install the `postgresql` package, or pass --database-url / set DATABASE_URL"
    )]
    BinariesMissing,
    #[error(
        "running as root, but there is no `postgres` user to run the PostgreSQL server as (the server refuses to run as root): create that user, run as another user, or pass --database-url / set DATABASE_URL"
    )]
    NoServerUser,
    #[error("{action}: {error}")]
    Io { action: String, error: io::Error },
    #[error("initdb failed to create a cluster in {}: {output}", data_dir.display())]
    InitDb { data_dir: PathBuf, output: String },
    #[error(
        "starting PostgreSQL (data directory {}, port {port}) failed: {output}\n--- end of the server log {} ---\n{log_tail}",
        data_dir.display(),
        log_file.display()
    )]
    Start {
        data_dir: PathBuf,
        port: u16,
        output: String,
        log_file: PathBuf,
        log_tail: String,
    },
    #[error("stopping PostgreSQL (data directory {}) failed: {output}", data_dir.display())]
    Stop { data_dir: PathBuf, output: String },
    #[error("could not start the watchdog that stops PostgreSQL after process {pid}: {error}")]
    Watchdog { pid: u32, error: io::Error },
}

fn io_error(action: impl Into<String>) -> impl FnOnce(io::Error) -> LocalPgError {
    let action = action.into();
    move |error| LocalPgError::Io { action, error }
}

/// A running PostgreSQL server on 127.0.0.1, owned by this process.
#[derive(Debug)]
pub struct LocalCluster {
    bins: Binaries,
    run_as: Option<RunAs>,
    cluster_dir: PathBuf,
    data_dir: PathBuf,
    port: u16,
    /// The postmaster's pid, as recorded in `postmaster.pid` right after startup.
    postmaster_pid: Option<u32>,
    /// Present when the folder is temporary; dropping it removes the folder.
    temp_dir: Option<tempfile::TempDir>,
    /// Watchdogs started by `stop_when_process_exits`; closing their stdin releases them.
    watchdogs: Mutex<Vec<(Child, Option<ChildStdin>)>>,
    stopped: bool,
}

impl LocalCluster {
    /// Creates (or reuses) a cluster and starts it; returns once it accepts connections.
    pub fn start(options: ClusterOptions) -> Result<LocalCluster, LocalPgError> {
        let bins = Binaries::find()?;
        let run_as = RunAs::needed()?;

        let (cluster_dir, temp_dir) = match &options.data_dir {
            None => {
                let temp = make_temp_dir(options.fast_unsafe)?;
                (temp.path().to_path_buf(), Some(temp))
            }
            Some(dir) => {
                fs::create_dir_all(dir).map_err(io_error(format!(
                    "creating cluster folder {}",
                    dir.display()
                )))?;
                let dir = dir.canonicalize().map_err(io_error(format!(
                    "resolving cluster folder {}",
                    dir.display()
                )))?;
                (dir, None)
            }
        };
        let mut cluster = LocalCluster::unstarted(bins, run_as, cluster_dir, temp_dir)?;
        // From here on, an early return drops `cluster`, which removes a temporary folder.
        cluster.init_if_needed()?;
        cluster.stop_leftover_server();

        let mut attempt = 0;
        cluster.port = loop {
            attempt += 1;
            let port = match options.port {
                Some(port) => port,
                None => free_port()?,
            };
            match cluster.start_server(port, options.fast_unsafe) {
                Ok(()) => break port,
                Err(LocalPgError::Start { log_tail, .. })
                    if options.port.is_none()
                        && attempt < PORT_ATTEMPTS
                        && log_tail.contains("Address already in use") =>
                {
                    tracing::debug!(port, "port taken meanwhile, retrying on another one");
                }
                Err(e) => {
                    // A start that timed out may have left a server behind.
                    if cluster.data_dir.join("postmaster.pid").exists() {
                        let _ = cluster.pg_ctl_stop("fast");
                    }
                    return Err(e);
                }
            }
        };
        cluster.stopped = false;
        cluster.postmaster_pid = cluster.read_postmaster_pid();
        tracing::info!(
            port = cluster.port,
            dir = %cluster.cluster_dir.display(),
            "local PostgreSQL cluster started"
        );
        Ok(cluster)
    }

    /// A cluster in `cluster_dir` (handed to the server's user when running
    /// as root), its server not started yet.
    fn unstarted(
        bins: Binaries,
        run_as: Option<RunAs>,
        cluster_dir: PathBuf,
        temp_dir: Option<tempfile::TempDir>,
    ) -> Result<LocalCluster, LocalPgError> {
        if let Some(run_as) = &run_as {
            std::os::unix::fs::chown(
                &cluster_dir,
                Some(run_as.uid.as_raw()),
                Some(run_as.gid.as_raw()),
            )
            .map_err(io_error(format!(
                "handing cluster folder {} to user `postgres`",
                cluster_dir.display()
            )))?;
        }
        Ok(LocalCluster {
            bins,
            run_as,
            data_dir: cluster_dir.join("data"),
            cluster_dir,
            port: 0,
            postmaster_pid: None,
            temp_dir,
            watchdogs: Mutex::new(Vec::new()),
            // Nothing to stop until the server is up; set back to false once it is.
            stopped: true,
        })
    }

    /// A streaming standby of this (running) cluster in a fresh temporary
    /// folder: `pg_basebackup -R` from it, then started read-only on a port
    /// of its own. It connects as `application_name = name`, the name
    /// `synchronous_standby_names` on this cluster uses to make it synchronous.
    pub fn start_standby(&self, name: &str) -> Result<LocalCluster, LocalPgError> {
        let temp = make_temp_dir(false)?;
        let cluster_dir = temp.path().to_path_buf();
        let mut standby = LocalCluster::unstarted(
            self.bins.clone(),
            self.run_as.clone(),
            cluster_dir,
            Some(temp),
        )?;
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres application_name={name}",
            self.port
        );
        let output = standby
            .command(&self.bins.pg_basebackup)
            .arg("-D")
            .arg(&standby.data_dir)
            .args(["-R", "-X", "stream", "--no-sync", "--checkpoint=fast", "-d"])
            .arg(&conninfo)
            .output()
            .map_err(io_error(format!(
                "running {}",
                self.bins.pg_basebackup.display()
            )))?;
        if !output.status.success() {
            return Err(LocalPgError::InitDb {
                data_dir: standby.data_dir.clone(),
                output: output_text(&output),
            });
        }
        let port = free_port()?;
        standby.start_server(port, false)?;
        standby.port = port;
        standby.stopped = false;
        standby.postmaster_pid = standby.read_postmaster_pid();
        Ok(standby)
    }

    /// Stops the server at once, as a crash would (`-m immediate`): what was
    /// not yet on disk or sent to a standby is gone.
    pub fn crash(&mut self) -> Result<(), LocalPgError> {
        self.stopped = true;
        self.pg_ctl_stop("immediate")
    }

    /// Stops the server and keeps its data, to start it again with [`resume`](Self::resume):
    /// a standby that was down while its primary went on, as one behind a
    /// broken network is.
    pub fn pause(&mut self) -> Result<(), LocalPgError> {
        self.shutdown()
    }

    /// Starts a paused server again on its port.
    pub fn resume(&mut self) -> Result<(), LocalPgError> {
        self.start_server(self.port, false)?;
        self.stopped = false;
        self.postmaster_pid = self.read_postmaster_pid();
        Ok(())
    }

    /// Promotes a standby to a primary (`pg_ctl promote`), waiting until it accepts writes.
    pub fn promote(&self) -> Result<(), LocalPgError> {
        let output = self
            .command(&self.bins.pg_ctl)
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-w", "-t", PG_CTL_TIMEOUT_SECS, "promote"])
            .output()
            .map_err(io_error("running pg_ctl promote"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(LocalPgError::Start {
                data_dir: self.data_dir.clone(),
                port: self.port,
                output: output_text(&output),
                log_file: self.cluster_dir.join("server.log"),
                log_tail: String::new(),
            })
        }
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/DATABASE`
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{}", self.port, database)
    }

    /// Stops the server (fast shutdown: open sessions are cut) and removes a temporary folder.
    pub fn stop(mut self) -> Result<(), LocalPgError> {
        let result = self.shutdown();
        if let Some(temp) = self.temp_dir.take() {
            let path = temp.path().to_path_buf();
            temp.close().map_err(io_error(format!(
                "removing cluster folder {}",
                path.display()
            )))?;
        }
        self.release_watchdogs();
        result
    }

    /// Leaves a detached watchdog process that stops the server and removes a temporary data dir
    /// once process `pid` is gone — for a cluster held in a static that is never dropped.
    pub fn stop_when_process_exits(&self, pid: u32) -> Result<(), LocalPgError> {
        // Our own exit is seen through the pipe closing; any other process is polled.
        let own = pid == std::process::id();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("effectwatch-pg-watchdog")
            .arg(if own { "pipe" } else { "poll" })
            .arg(pid.to_string())
            .arg(&self.data_dir)
            .arg(
                self.postmaster_pid
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
            )
            .arg(if self.temp_dir.is_some() {
                self.cluster_dir.as_os_str()
            } else {
                "".as_ref()
            })
            .current_dir("/")
            .stdin(if own { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Out of our process group, so a Ctrl-C aimed at us does not kill the watchdog.
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|error| LocalPgError::Watchdog { pid, error })?;
        let stdin = child.stdin.take();
        self.watchdogs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push((child, stdin));
        Ok(())
    }

    fn init_if_needed(&self) -> Result<(), LocalPgError> {
        if self.data_dir.join("PG_VERSION").is_file() {
            tracing::debug!(dir = %self.data_dir.display(), "reusing initialised cluster");
            return Ok(());
        }
        let mut cmd = self.command(&self.bins.initdb);
        cmd.arg("-D")
            .arg(&self.data_dir)
            .args(["--auth=trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
            .arg(format!("--locale={}", cluster_locale()));
        let output = cmd
            .output()
            .map_err(io_error(format!("running {}", self.bins.initdb.display())))?;
        if !output.status.success() {
            let mut text = output_text(&output);
            if self.run_as.is_some() {
                text.push_str(
                    "\n(running as root, so the server runs as user `postgres`, which must be able to reach this folder)",
                );
            }
            return Err(LocalPgError::InitDb {
                data_dir: self.data_dir.clone(),
                output: text,
            });
        }
        Ok(())
    }

    /// A kept folder may still have a server running from a run that was killed; it would keep
    /// ours from starting, and it is ours to stop.
    fn stop_leftover_server(&self) {
        if !self.data_dir.join("postmaster.pid").exists() {
            return;
        }
        let status = self
            .command(&self.bins.pg_ctl)
            .arg("-D")
            .arg(&self.data_dir)
            .arg("status")
            .output();
        if matches!(&status, Ok(o) if o.status.success()) {
            tracing::warn!(dir = %self.data_dir.display(), "stopping a leftover server on this data directory");
            if let Err(e) = self.pg_ctl_stop("fast") {
                tracing::warn!("{e}");
            }
        }
    }

    fn start_server(&self, port: u16, fast_unsafe: bool) -> Result<(), LocalPgError> {
        let log_file = self.cluster_dir.join("server.log");
        let log_start = fs::metadata(&log_file).map(|m| m.len()).unwrap_or(0);

        let socket_path_len =
            self.cluster_dir.as_os_str().len() + format!("/.s.PGSQL.{port}.lock").len();
        let socket = if socket_path_len <= MAX_SOCKET_PATH {
            format!("-k {}", shell_quote(&self.cluster_dir.to_string_lossy()))
        } else {
            "-c unix_socket_directories=''".to_string()
        };
        // pg_ctl hands these to the server through `/bin/sh`, hence the quoting.
        let mut server_options =
            format!("-p {port} {socket} -c listen_addresses=127.0.0.1 -c max_connections=200");
        if fast_unsafe {
            server_options.push_str(
                " -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_wal_size=256MB",
            );
        }

        let output = self
            .command(&self.bins.pg_ctl)
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(&log_file)
            .args(["-w", "-t", PG_CTL_TIMEOUT_SECS, "-o"])
            .arg(&server_options)
            .arg("start")
            .output()
            .map_err(io_error(format!("running {}", self.bins.pg_ctl.display())))?;
        if output.status.success() {
            return Ok(());
        }
        Err(LocalPgError::Start {
            data_dir: self.data_dir.clone(),
            port,
            output: output_text(&output),
            log_tail: log_tail(&log_file, log_start),
            log_file,
        })
    }

    fn shutdown(&mut self) -> Result<(), LocalPgError> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        self.pg_ctl_stop("fast")
    }

    /// `pg_ctl stop` in `mode`: `fast` cuts open sessions, `immediate` is a crash.
    fn pg_ctl_stop(&self, mode: &str) -> Result<(), LocalPgError> {
        let result = self
            .command(&self.bins.pg_ctl)
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-m", mode, "-w", "-t", PG_CTL_TIMEOUT_SECS, "stop"])
            .output();
        match result {
            Ok(output) if output.status.success() => Ok(()),
            // Already gone (it crashed, or someone stopped it): nothing left to do.
            _ if !self.data_dir.join("postmaster.pid").exists() => Ok(()),
            Ok(output) => Err(LocalPgError::Stop {
                data_dir: self.data_dir.clone(),
                output: output_text(&output),
            }),
            Err(e) => Err(LocalPgError::Stop {
                data_dir: self.data_dir.clone(),
                output: format!("running {}: {e}", self.bins.pg_ctl.display()),
            }),
        }
    }

    fn release_watchdogs(&mut self) {
        let watchdogs = self
            .watchdogs
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (child, stdin) in watchdogs.iter_mut() {
            // Closing the pipe wakes the watchdog, which finds nothing left to do.
            drop(stdin.take());
            let _ = child.try_wait();
        }
    }

    /// The first line of `postmaster.pid`.
    fn read_postmaster_pid(&self) -> Option<u32> {
        let text = fs::read_to_string(self.data_dir.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// A command for a server binary, run as the server's user when we are root.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.cluster_dir)
            .stdin(Stdio::null())
            // Untranslated messages, so failures can be recognised; no stray connection settings.
            .env("LC_ALL", "C")
            .env_remove("LANGUAGE")
            .env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST")
            .env_remove("PGOPTIONS");
        if let Some(run_as) = &self.run_as {
            // std drops supplementary groups when a root process switches uid.
            cmd.uid(run_as.uid.as_raw())
                .gid(run_as.gid.as_raw())
                .env("HOME", &run_as.home)
                .env("USER", "postgres")
                .env("LOGNAME", "postgres");
        }
        cmd
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!("{e}");
        }
        if let Some(temp) = self.temp_dir.take() {
            let path = temp.path().to_path_buf();
            if let Err(e) = temp.close() {
                tracing::warn!("removing cluster folder {}: {e}", path.display());
            }
        }
        self.release_watchdogs();
    }
}

/// Waits for our exit (pipe) or polls process `$2`, then fast-stops the postmaster if it is still
/// the one we started, waits for it to go, and removes the temporary folder if there is one.
/// The postmaster removes `postmaster.pid` as its last act; that is watched as well as the pid
/// because an exited postmaster lingers as a zombie (seen by `kill -0`) until init reaps it.
const WATCHDOG_SCRIPT: &str = r#"
mode=$1 pid=$2 data=$3 pm=$4 dir=$5
if [ "$mode" = pipe ]; then
  cat >/dev/null
else
  while kill -0 "$pid" 2>/dev/null || [ -d "/proc/$pid" ]; do sleep 1; done
fi
if [ -n "$pm" ] && [ -f "$data/postmaster.pid" ]; then
  read -r current < "$data/postmaster.pid"
  if [ "$current" = "$pm" ] && kill -INT "$pm" 2>/dev/null; then
    i=0
    while [ -f "$data/postmaster.pid" ] && kill -0 "$pm" 2>/dev/null && [ "$i" -lt 600 ]; do
      sleep 0.1
      i=$((i + 1))
    done
  fi
fi
if [ -n "$dir" ]; then rm -rf -- "$dir"; fi
"#;

#[derive(Debug, Clone)]
struct Binaries {
    initdb: PathBuf,
    pg_ctl: PathBuf,
    /// Beside the others; only standbys need it.
    pg_basebackup: PathBuf,
}

impl Binaries {
    fn find() -> Result<Binaries, LocalPgError> {
        Self::from_versioned_dirs()
            .or_else(Self::from_path)
            .ok_or(LocalPgError::BinariesMissing)
    }

    fn in_dir(dir: &Path) -> Option<Binaries> {
        let initdb = dir.join("initdb");
        let pg_ctl = dir.join("pg_ctl");
        let pg_basebackup = dir.join("pg_basebackup");
        (is_executable(&initdb) && is_executable(&pg_ctl)).then_some(Binaries {
            initdb,
            pg_ctl,
            pg_basebackup,
        })
    }

    /// `/usr/lib/postgresql/<version>/bin`, highest version first.
    fn from_versioned_dirs() -> Option<Binaries> {
        let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let name = entry.file_name().into_string().ok()?;
                let version = name
                    .split('.')
                    .map(|part| part.parse().ok())
                    .collect::<Option<Vec<u32>>>()?;
                Some((version, entry.path().join("bin")))
            })
            .collect();
        versions.sort();
        versions.iter().rev().find_map(|(_, dir)| Self::in_dir(dir))
    }

    /// `initdb` on PATH, with `pg_ctl` from the same (symlink-resolved) folder or else from PATH.
    fn from_path() -> Option<Binaries> {
        let path = std::env::var_os("PATH")?;
        let find = |name: &str| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|p| is_executable(p))
        };
        let initdb = find("initdb")?;
        if let Some(bins) = initdb
            .canonicalize()
            .ok()
            .and_then(|real| real.parent().and_then(Self::in_dir))
        {
            return Some(bins);
        }
        Some(Binaries {
            initdb,
            pg_ctl: find("pg_ctl")?,
            pg_basebackup: find("pg_basebackup").unwrap_or_else(|| "pg_basebackup".into()),
        })
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[derive(Debug, Clone)]
struct RunAs {
    uid: Uid,
    gid: Gid,
    home: PathBuf,
}

impl RunAs {
    /// `Some` when we are root and must hand the server to the `postgres` user.
    fn needed() -> Result<Option<RunAs>, LocalPgError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(None);
        }
        match User::from_name("postgres") {
            Ok(Some(user)) if !user.uid.is_root() => Ok(Some(RunAs {
                uid: user.uid,
                gid: user.gid,
                home: user.dir,
            })),
            _ => Err(LocalPgError::NoServerUser),
        }
    }
}

/// A temporary cluster folder whose socket path stays under the kernel's limit; in memory
/// (`/dev/shm`) for a throwaway test cluster when there is room.
fn make_temp_dir(in_memory: bool) -> Result<tempfile::TempDir, LocalPgError> {
    let shm = Path::new("/dev/shm");
    let base = if in_memory && has_room(shm) {
        shm.to_path_buf()
    } else {
        let base = std::env::temp_dir();
        // "/ewpg-XXXXXX/.s.PGSQL.65535.lock"
        if base.as_os_str().len() + 34 <= MAX_SOCKET_PATH {
            base
        } else {
            PathBuf::from("/tmp")
        }
    };
    tempfile::Builder::new()
        .prefix("ewpg-")
        .tempdir_in(&base)
        .map_err(io_error(format!(
            "creating a temporary cluster folder in {}",
            base.display()
        )))
}

/// Whether `dir` is a writable folder with room for a test cluster (containers often give
/// `/dev/shm` only 64 MiB).
#[allow(clippy::useless_conversion)] // the statvfs field types are u64 on Linux, not everywhere
fn has_room(dir: &Path) -> bool {
    use nix::unistd::{AccessFlags, access};
    dir.is_dir()
        && access(dir, AccessFlags::W_OK | AccessFlags::X_OK).is_ok()
        && nix::sys::statvfs::statvfs(dir).is_ok_and(|stats| {
            u64::from(stats.blocks_available()).saturating_mul(u64::from(stats.fragment_size()))
                >= MIN_MEMORY_DIR_BYTES
        })
}

fn free_port() -> Result<u16, LocalPgError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(io_error("looking for a free port on 127.0.0.1"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(io_error("looking for a free port on 127.0.0.1"))
}

/// `C.UTF-8` where the C library has it (glibc), so non-ASCII text behaves; plain `C` otherwise.
fn cluster_locale() -> &'static str {
    let has_c_utf8 = ["/usr/lib/locale/C.utf8", "/usr/lib/locale/C.UTF-8"]
        .iter()
        .any(|p| Path::new(p).exists());
    if has_c_utf8 { "C.UTF-8" } else { "C" }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn output_text(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stderr).trim().to_string();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stdout = stdout.trim();
    if !stdout.is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(stdout);
    }
    if text.is_empty() {
        text = output.status.to_string();
    }
    text
}

/// The last lines the server wrote to its log since `from` (the log is appended to across runs).
fn log_tail(log_file: &Path, from: u64) -> String {
    let read = || -> io::Result<String> {
        let mut file = fs::File::open(log_file)?;
        file.seek(SeekFrom::Start(from))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
            if tail.is_empty() {
                "(the server log is empty)".to_string()
            } else {
                tail
            }
        }
        Err(e) => format!("(could not read the server log: {e})"),
    }
}
