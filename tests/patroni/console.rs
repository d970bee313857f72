//! The real console in a real pseudo-terminal, as tests/console_pty.rs runs
//! it (its helpers, cut down to what a console watching a Patroni cluster
//! needs): `effectwatch --database-url <the cluster> --read-url <a node>`,
//! its output fed into a terminal emulator as it arrives, and every header
//! line it drew kept with when it was drawn, so that a test can say what
//! the console showed while the leader moved, not only at the end.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{Child, CommandBuilder, PtySize, native_pty_system};

pub const ROWS: u16 = 35;
/// Wide enough that the header says everything it has to say.
pub const COLS: u16 = 180;

pub struct Console {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    screen: Arc<Mutex<vt100::Parser>>,
    /// Each header line drawn, with when: a new entry only when it changed.
    headers: Arc<Mutex<Vec<(Instant, String)>>>,
    home: tempfile::TempDir,
}

impl Console {
    /// The console on `database_url` (actions) reading `read_url` (panes),
    /// polling every half second, `config` as its config file.
    pub fn start(database_url: &str, read_url: &str, config: &str) -> Console {
        let home = tempfile::tempdir().unwrap();
        let config_path = home.path().join("config.toml");
        std::fs::write(&config_path, config).unwrap();
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("opening a pty");
        let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_effectwatch"));
        command.args(["--database-url", database_url, "--read-url", read_url]);
        command.args(["--no-notify", "--poll-interval", "0.5", "--config"]);
        command.arg(config_path.to_str().unwrap());
        command.env_remove("DATABASE_URL");
        command.env_remove("EFFECTWATCH_READ_URL");
        command.env("TERM", "xterm-256color");
        command.env("HOME", home.path());
        for (variable, folder) in [
            ("XDG_CONFIG_HOME", ".config"),
            ("XDG_CACHE_HOME", ".cache"),
            ("XDG_DATA_HOME", ".local/share"),
            ("XDG_STATE_HOME", ".local/state"),
            ("XDG_RUNTIME_DIR", "run"),
        ] {
            command.env(variable, home.path().join(folder));
        }
        command.cwd(home.path());
        let child = pair
            .slave
            .spawn_command(command)
            .expect("spawning effectwatch");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let writer = pair.master.take_writer().unwrap();
        let screen = Arc::new(Mutex::new(vt100::Parser::new(ROWS, COLS, 0)));
        let headers = Arc::new(Mutex::new(Vec::new()));
        {
            let (screen, headers) = (screen.clone(), headers.clone());
            std::thread::spawn(move || {
                // Keeps the master open for as long as the child may write.
                let _master = pair.master;
                let mut chunk = [0u8; 8192];
                loop {
                    match reader.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut parser = screen.lock().unwrap();
                            parser.process(&chunk[..n]);
                            let header = parser.screen().rows(0, COLS).next().unwrap_or_default();
                            let mut headers = headers.lock().unwrap();
                            if headers.last().is_none_or(|(_, last)| *last != header) {
                                headers.push((Instant::now(), header));
                            }
                        }
                    }
                }
            });
        }
        Console {
            child,
            writer,
            screen,
            headers,
            home,
        }
    }

    pub fn screen(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    pub fn header(&self) -> String {
        self.screen()
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// The header lines drawn since `since`, in order.
    pub fn headers_since(&self, since: Instant) -> Vec<String> {
        self.headers
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| *at >= since)
            .map(|(_, header)| header.trim().to_string())
            .collect()
    }

    pub fn press(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Whether the process that was started still runs: never restarted.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until the screen satisfies `done`; returns how long it took.
    pub async fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&str) -> bool,
    ) -> Duration {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if done(&screen) {
                return started.elapsed();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{what}: effectwatch exited ({status:?}) first; the screen:\n{screen}\nthe log:\n{}",
                    self.log()
                );
            }
            assert!(
                started.elapsed() < timeout,
                "{what}: not seen within {timeout:?}; the screen:\n{screen}\nthe log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn log(&self) -> String {
        let path = self.home.path().join(".cache/effectwatch/effectwatch.log");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(no log: {e})"));
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
