//! The console's runtime: the poller against a real database (one that goes
//! silent, one whose finance review fails, one that sends NOTIFY bursts),
//! what the finance view shows for a failed review, and quitting the real
//! binary in a pseudo-terminal.

mod common;
mod fixtures;
mod settle_support;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{Child, CommandBuilder, ExitStatus, PtySize, native_pty_system};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use effectwatch::console::app::{
    App, Connection, Message, Notifications, Settings, Shown, Snapshot,
};
use effectwatch::console::poller::{self, PollSettings};
use effectwatch::console::theme::{Role, Theme};
use effectwatch::console::views;
use effectwatch::fakeprovider::{FakeProvider, Fault, Route};
use effectwatch::ledger::escalations;
use effectwatch::ledger::panes::{Filter, Pane};
use effectwatch::ledger::writer::{self, Completion, Intent, Outcome};
use effectwatch::ledger::{ConnectSettings, NOTIFY_CHANNEL};
use effectwatch::settle::Request;
use effectwatch::settle::verbs::{self, Answers};
use serde_json::json;
use settle_support::{PROVIDER_TIMEOUT_MS, Rig};

fn settings(interval: Duration) -> PollSettings {
    PollSettings {
        settled_actions: 0,
        filter: Filter::default(),
        interval,
        paused: false,
        offsets: [0; 4],
        at: None,
    }
}

/// The next message from the poller that is not a tick, within `within`.
async fn next(messages: &mut mpsc::Receiver<Message>, within: Duration) -> Option<Message> {
    tokio::time::timeout(within, messages.recv())
        .await
        .ok()
        .flatten()
}

/// A poller on `url` with these settings: the settings' sender, its messages, its task.
fn start_poller(
    url: &str,
    initial: PollSettings,
) -> (
    watch::Sender<PollSettings>,
    mpsc::Receiver<Message>,
    tokio::task::JoinHandle<()>,
) {
    let (settings_sender, settings_receiver) = watch::channel(initial);
    let (sender, messages) = mpsc::channel(256);
    let poller = poller::spawn(
        ConnectSettings::new(url.to_string()),
        settings_receiver,
        sender,
    );
    (settings_sender, messages, poller)
}

async fn next_snapshot(messages: &mut mpsc::Receiver<Message>) -> Box<Snapshot> {
    match next(messages, Duration::from_secs(20)).await {
        Some(Message::Snapshot(snapshot)) => snapshot,
        other => panic!("expected a snapshot, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// A database that stops answering without closing the connection.

/// A TCP proxy to the test server that can turn into a black hole: bytes
/// are still accepted from both sides but never passed on, as when a
/// network path dies without a reset; or go down, as the server does in an
/// outage: every connection closed, new ones closed as they come.
struct Proxy {
    url: String,
    silent: Arc<AtomicBool>,
    down: watch::Sender<bool>,
}

async fn proxy(database_url: &str) -> Proxy {
    let authority_start = database_url.find("://").unwrap() + 3;
    let authority_end = authority_start + database_url[authority_start..].find('/').unwrap();
    let authority = &database_url[authority_start..authority_end];
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    let upstream = match &authority[host_start..] {
        host if host.contains(':') => host.to_string(),
        host => format!("{host}:5432"),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "{}{}127.0.0.1:{}{}",
        &database_url[..authority_start],
        &authority[..host_start],
        listener.local_addr().unwrap().port(),
        &database_url[authority_end..]
    );
    let silent = Arc::new(AtomicBool::new(false));
    let gate = silent.clone();
    let (down, is_down) = watch::channel(false);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            if *is_down.borrow() {
                continue;
            }
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(pipe(
                client_read,
                server_write,
                gate.clone(),
                is_down.clone(),
            ));
            tokio::spawn(pipe(
                server_read,
                client_write,
                gate.clone(),
                is_down.clone(),
            ));
        }
    });
    Proxy { url, silent, down }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    silent: Arc<AtomicBool>,
    mut down: watch::Receiver<bool>,
) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = down.wait_for(|down| *down) => return,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) if silent.load(Ordering::Relaxed) => {}
            Ok(n) => {
                if to.write_all(&buffer[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[tokio::test]
async fn a_database_that_goes_silent_turns_the_console_stale() {
    let db = common::test_db().await;
    let proxy = proxy(&db.url).await;
    let mut connect = ConnectSettings::new(proxy.url.clone());
    connect.statement_timeout = Duration::from_secs(1);
    let (_settings_sender, settings_receiver) =
        watch::channel(settings(Duration::from_millis(200)));
    let (sender, mut messages) = mpsc::channel(256);
    let poller = poller::spawn(connect, settings_receiver, sender);
    next_snapshot(&mut messages).await;

    // The network dies while a poll is waiting for its answer: a lock holds
    // the poll on the server, and its answer (an error once the statement
    // timeout cancels it) never comes back.
    let mut locker = db.connect().await;
    sqlx::query("begin").execute(&mut locker).await.unwrap();
    sqlx::query("lock table ledger.effects in access exclusive mode")
        .execute(&mut locker)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    proxy.silent.store(true, Ordering::Relaxed);
    let silenced = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    sqlx::query("commit").execute(&mut locker).await.unwrap();
    let error = loop {
        match next(&mut messages, Duration::from_secs(20)).await {
            Some(Message::Snapshot(_)) => continue,
            Some(Message::PollFailed(error)) => break error,
            other => panic!("expected the poll to fail, got {other:?}"),
        }
    };
    assert_eq!(error, "no answer from the database within 6 s");
    assert!(silenced.elapsed() < Duration::from_secs(10), "{silenced:?}");

    // The poller does not give up: it keeps trying on a new connection.
    proxy.silent.store(false, Ordering::Relaxed);
    let recovered = loop {
        match next(&mut messages, Duration::from_secs(30)).await {
            Some(Message::PollFailed(_)) => continue,
            other => break other,
        }
    };
    assert!(
        matches!(recovered, Some(Message::Snapshot(_))),
        "{recovered:?}"
    );
    poller.abort();
}

/// What a console on `messages` shows once they are applied, and whether
/// it calls itself live: the first message that turns it stale, within `within`.
async fn stale_within(
    app: &mut App,
    messages: &mut mpsc::Receiver<Message>,
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while let Some(message) = next(messages, within.saturating_sub(started.elapsed())).await {
        app.update(message);
        if matches!(app.connection(), Connection::Stale { .. }) {
            return Some(started.elapsed());
        }
    }
    None
}

/// A console polling once a minute during a server outage: it says it is
/// stale within seconds, not at its next poll, and live again once the
/// server is back; likewise when the network goes silent between polls,
/// where no connection ends to say so.
#[tokio::test]
async fn an_outage_between_the_polls_of_a_long_interval_turns_the_console_stale() {
    let db = common::test_db().await;
    let proxy = proxy(&db.url).await;
    let mut connect = ConnectSettings::new(proxy.url.clone());
    connect.statement_timeout = Duration::from_secs(1);
    connect.connect_timeout = Duration::from_secs(2);
    let (_settings_sender, settings_receiver) = watch::channel(settings(Duration::from_secs(60)));
    let (sender, mut messages) = mpsc::channel(256);
    let poller = poller::spawn(connect, settings_receiver, sender);
    let mut app = App::new(Settings::new("ops", true, Duration::from_secs(60)));
    app.update(Message::Snapshot(next_snapshot(&mut messages).await));
    assert_eq!(*app.connection(), Connection::Live);

    proxy.down.send_replace(true);
    let stale = stale_within(&mut app, &mut messages, Duration::from_secs(20)).await;
    assert!(
        stale.is_some(),
        "still live 20 s into the outage: {:?}",
        app.connection()
    );
    eprintln!("stale {:?} into the outage", stale.unwrap());
    proxy.down.send_replace(false);
    let back = loop {
        match next(&mut messages, Duration::from_secs(40)).await {
            Some(Message::PollFailed(_)) => continue,
            other => break other,
        }
    };
    assert!(matches!(back, Some(Message::Snapshot(_))), "{back:?}");
    app.update(back.unwrap());
    assert_eq!(*app.connection(), Connection::Live);

    // The network dies without a reset: nothing ends, nothing answers.
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.silent.store(true, Ordering::Relaxed);
    let stale = stale_within(&mut app, &mut messages, Duration::from_secs(20)).await;
    assert!(
        stale.is_some(),
        "still live 20 s into a silent network: {:?}",
        app.connection()
    );
    eprintln!("stale {:?} into the silence", stale.unwrap());
    poller.abort();
}

// ---------------------------------------------------------------------------
// The finance review apart from the panes.

#[tokio::test]
async fn a_failing_finance_review_leaves_the_panes_fresh() {
    let db = common::test_db().await;
    sqlx::query("alter function ledger.exposure_at rename to exposure_at_gone")
        .execute(&db.pool)
        .await
        .unwrap();
    let pool = effectwatch::ledger::connect(&ConnectSettings::new(db.url.clone()))
        .await
        .unwrap();

    let snapshot = poller::poll(&pool, &settings(Duration::from_secs(2)))
        .await
        .expect("the panes are read although the finance review fails");
    assert_eq!(snapshot.panes.len(), Pane::ALL.len());
    assert_eq!(snapshot.finance, None);
    let error = snapshot.finance_error.expect("the failure is reported");
    assert!(error.contains("exposure_at"), "{error}");
}

#[test]
fn the_finance_view_shows_a_failed_review_instead_of_the_exposure() {
    let mut app = App::new(Settings::new("alice", false, Duration::from_secs(2)));
    let snapshot = Snapshot {
        finance: None,
        finance_error: Some("ledger: bigint out of range\n(sum)".to_string()),
        ..fixtures::snapshot(3)
    };
    app.update(Message::Snapshot(Box::new(snapshot)));
    app.update(Message::Key(crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::Char('7'),
        crossterm::event::KeyModifiers::NONE,
    )));

    let theme = Theme::default();
    let mut terminal = Terminal::new(TestBackend::new(140, 30)).unwrap();
    terminal
        .draw(|frame| views::draw(frame, &app, &theme))
        .unwrap();
    let buffer = terminal.backend().buffer().clone();
    let row = (0..buffer.area.height)
        .find(|&y| {
            let line: String = (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect();
            line.contains("✗ the finance review failed: ledger: bigint out of range (sum)")
        })
        .expect("the failure is on screen");
    let x = (0..buffer.area.width)
        .find(|&x| buffer[(x, row)].symbol() == "✗")
        .unwrap();
    assert_eq!(buffer[(x, row)].fg, theme.role(Role::Critical).fg.unwrap());
    let screen: String = buffer.content.iter().map(|cell| cell.symbol()).collect();
    assert!(
        !screen.contains("suspected excess"),
        "no exposure table header"
    );
}

// ---------------------------------------------------------------------------
// NOTIFY bursts and the operator's own changes.

#[tokio::test]
async fn a_notify_burst_refreshes_within_a_second_whatever_the_interval() {
    let db = common::test_db().await;
    let (settings_sender, mut messages, poller) =
        start_poller(&db.url, settings(Duration::from_secs(300)));
    next_snapshot(&mut messages).await;
    // Let the LISTEN connection settle before notifying.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // With a 300 s interval, a burst of 60 notifications over 3 s is seen
    // within about a second, and polled about once a second, not 60 times.
    let burst = Instant::now();
    let notifier = db.pool.clone();
    let notifying = tokio::spawn(async move {
        for _ in 0..60 {
            sqlx::query("select pg_notify($1, 'changed')")
                .bind(NOTIFY_CHANNEL)
                .execute(&notifier)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    next_snapshot(&mut messages).await;
    let first_after = burst.elapsed();
    assert!(
        first_after < Duration::from_millis(1_600),
        "first refresh after {first_after:?}"
    );
    let mut polls = 1;
    let until = burst + Duration::from_millis(3_500);
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        if let Some(Message::Snapshot(_)) = next(&mut messages, left).await {
            polls += 1;
        }
    }
    notifying.await.unwrap();
    assert!(
        (2..=6).contains(&polls),
        "{polls} polls for a 3 s burst of 60 notifications"
    );

    // A key the operator pressed polls at once.
    let asked = Instant::now();
    settings_sender.send_modify(|s| s.offsets = [0, 0, 0, 0]);
    next_snapshot(&mut messages).await;
    assert!(asked.elapsed() < Duration::from_secs(5), "{asked:?}");

    // Ending the poller ends its LISTEN session too.
    let sessions = || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from pg_stat_activity
              where datname = current_database() and application_name = 'effectwatch'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    assert!(sessions().await > 0);
    poller.abort();
    let ended = Instant::now();
    while sessions().await > 0 {
        assert!(
            ended.elapsed() < Duration::from_secs(10),
            "the poller's sessions outlive it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------
// Quitting the real binary.

/// The binary in a pseudo-terminal, as much of it as quitting needs.
struct Console {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    output: Arc<Mutex<Vec<u8>>>,
    /// While set, the console's output is not read: its writes block once
    /// the pty's buffer is full, as on a stalled terminal.
    stalled: Arc<AtomicBool>,
    _home: tempfile::TempDir,
}

impl Console {
    fn start(database_url: &str, config: &str) -> Console {
        let home = tempfile::tempdir().unwrap();
        let config_path = home.path().join("config.toml");
        std::fs::write(&config_path, config).unwrap();
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: 35,
                cols: 140,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_effectwatch"));
        command.args(["--database-url", database_url, "--no-notify"]);
        command.args(["--poll-interval", "0.5"]);
        command.args(["--config", config_path.to_str().unwrap()]);
        command.env_remove("DATABASE_URL");
        command.env("TERM", "xterm-256color");
        command.env("HOME", home.path());
        command.env("XDG_CACHE_HOME", home.path().join(".cache"));
        command.env("XDG_CONFIG_HOME", home.path().join(".config"));
        command.cwd(home.path());
        let child = pair.slave.spawn_command(command).unwrap();
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let writer = pair.master.take_writer().unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        let stalled = Arc::new(AtomicBool::new(false));
        let (collected, stall) = (output.clone(), stalled.clone());
        std::thread::spawn(move || {
            let _master = pair.master;
            let mut chunk = [0u8; 8192];
            loop {
                if stall.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                match reader.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => collected.lock().unwrap().extend_from_slice(&chunk[..n]),
                }
            }
        });
        Console {
            child,
            writer,
            output,
            stalled,
            _home: home,
        }
    }

    fn screen(&self) -> String {
        let mut parser = vt100::Parser::new(35, 140, 0);
        parser.process(&self.output.lock().unwrap());
        parser.screen().contents()
    }

    async fn wait_for(&mut self, what: &str, done: impl Fn(&str) -> bool) {
        let started = Instant::now();
        while !done(&self.screen()) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{what}: not seen; the screen:\n{}",
                self.screen()
            );
            assert!(self.child.try_wait().unwrap().is_none(), "exited early");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn press(&mut self, keys: &[u8]) {
        self.writer.write_all(keys).unwrap();
        self.writer.flush().unwrap();
    }

    async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < within,
                "still running {within:?} after quitting; the screen:\n{}",
                self.screen()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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

#[tokio::test]
async fn quitting_with_a_full_input_queue_does_not_hang() {
    let db = common::test_db().await;
    let mut console = Console::start(&db.url, "");
    console
        .wait_for("the live console", |s| s.contains("● live"))
        .await;
    // A stalled terminal blocks the console in a draw (help toggled on and
    // off fills the pty's buffer) while `q` and, behind it, more keys than
    // the channel holds arrive: the input thread is blocked on the full
    // channel when the quit is handled.
    console.stalled.store(true, Ordering::Relaxed);
    console.press(&[b'?'; 400]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut keys = b"q".to_vec();
    keys.extend(std::iter::repeat_n(b'j', 3_000));
    console.press(&keys);
    tokio::time::sleep(Duration::from_millis(500)).await;
    console.stalled.store(false, Ordering::Relaxed);
    let status = console.wait_exit(Duration::from_secs(5)).await;
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn quitting_waits_for_an_action_under_way() {
    let db = common::test_db().await;
    let (provider, _) = FakeProvider::start().await.unwrap();
    provider.set_fault(Route::Lookup, Some(Fault::Slow(Duration::from_secs(1))));
    let op_key = "refund:INV-9:AP-1:v1";
    writer::begin_effect(
        &db.pool,
        &Intent {
            op_key: op_key.into(),
            action: "refund".into(),
            target: "invoice:INV-9".into(),
            params: json!({ "amount_minor": 500, "currency": "EUR" }),
            requested_by: "agent-7".into(),
            amount_minor: Some(500),
            currency: Some("EUR".into()),
            provider: Some("pay".into()),
            ..Intent::default()
        },
    )
    .await
    .unwrap();
    writer::mark_dispatched(&db.pool, op_key, None, "agent-7")
        .await
        .unwrap();
    let completion = Completion {
        reason: Some("provider timed out".into()),
        worker: Some("agent-7".into()),
        ..Completion::default()
    };
    writer::complete_effect(&db.pool, op_key, Outcome::Unknown, &completion)
        .await
        .unwrap();
    let config = format!(
        "operator = \"alice\"\n{}",
        provider.provider_toml("pay", 8_000)
    );
    let mut console = Console::start(&db.url, &config);
    console.press(b"2");
    console
        .wait_for("the unknown effect", |s| s.contains("INV-9"))
        .await;
    console.press(b"r");
    console
        .wait_for("the confirmation", |s| s.contains("[ Confirm ]"))
        .await;
    console.press(b"y\r");
    console
        .wait_for("the action under way", |s| s.contains("… reconcile"))
        .await;
    console.press(b"q");
    console
        .wait_for("the wait", |s| s.contains("finishing 1 action(s)…"))
        .await;
    let status = console.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "{status:?}");

    // The reconciliation ran to its end before the console left.
    let audit = effectwatch::ledger::audit::recent(&db.pool, None, 20)
        .await
        .unwrap();
    assert!(
        audit
            .iter()
            .any(|e| e.action == "reconcile" && e.op_key.as_deref() == Some(op_key)),
        "{audit:?}"
    );
}

#[tokio::test]
async fn a_writing_console_retries_failed_escalation_deliveries() {
    let rig = Rig::new().await;
    rig.unknown_effect("refund:ESC:v1", 1500).await;
    rig.fake.fail_next(Route::Hook, Fault::Status(503));
    let report = rig
        .settler("bob")
        .settle(Request::on_effect(
            &verbs::ESCALATE,
            "refund:ESC:v1",
            None,
            Answers {
                sink: None,
                ..Answers::because("nobody can tell whether the customer got the money")
            },
        ))
        .await
        .unwrap();
    let key = report.detail["escalation_key"]
        .as_str()
        .unwrap()
        .to_string();
    let status = escalations::escalation_status(&rig.db.pool, &key)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(status.state, "delivered");

    // The console's config has the sink the escalation went to.
    let config = format!(
        "operator = \"alice\"\n{}\n[sinks.ops]\nkind = \"webhook\"\nurl = \"{}/hooks/ops\"\ntimeout_ms = {PROVIDER_TIMEOUT_MS}\n",
        rig.fake.provider_toml("pay", PROVIDER_TIMEOUT_MS),
        rig.base_url
    );
    let mut console = Console::start(&rig.db.url, &config);
    console
        .wait_for("the delivery", |s| {
            s.contains("✉ delivered 1 escalation(s)")
        })
        .await;
    let status = escalations::escalation_status(&rig.db.pool, &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.state, "delivered");
    console.press(b"q");
    assert!(console.wait_exit(Duration::from_secs(5)).await.success());
}

#[tokio::test]
async fn a_lost_listen_connection_comes_back_and_the_console_says_while_it_is_gone() {
    let db = common::test_db().await;
    let (_settings_sender, mut messages, poller) =
        start_poller(&db.url, settings(Duration::from_secs(300)));
    next_snapshot(&mut messages).await;
    let notify = || async {
        sqlx::query("select pg_notify($1, 'changed')")
            .bind(NOTIFY_CHANNEL)
            .execute(&db.pool)
            .await
            .unwrap();
    };
    let listeners = || async {
        sqlx::query_scalar::<_, i32>(
            "select pid from pg_stat_activity
              where datname = current_database() and query ilike 'listen%'",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    // Wait for the LISTEN session, then see a NOTIFY wake a poll that says it listens.
    let started = Instant::now();
    while listeners().await.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no LISTEN session"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    notify().await;
    let woken = next_snapshot(&mut messages).await;
    assert_eq!(woken.notifications, Notifications::Arriving);

    for round in 0..3 {
        // The LISTEN session ends, as in a restart or a pooler's reaping.
        for pid in listeners().await {
            sqlx::query("select pg_terminate_backend($1)")
                .bind(pid)
                .execute(&db.pool)
                .await
                .unwrap();
        }
        // It comes back, and its reconnect polls once for what was missed.
        let back = next_snapshot(&mut messages).await;
        assert!(
            back.notifications == Notifications::Arriving,
            "round {round}: the poll after the reconnect"
        );
        notify().await;
        let asked = Instant::now();
        let woken = next(&mut messages, Duration::from_secs(3)).await;
        assert!(
            matches!(woken, Some(Message::Snapshot(_))),
            "round {round}: a NOTIFY after the reconnect woke nothing within 3 s"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "round {round}: {:?}",
            asked.elapsed()
        );
    }
    poller.abort();
}

#[tokio::test]
async fn a_console_reading_an_instant_polls_once_per_instant_and_never_listens() {
    let db = common::test_db().await;
    let t1 = chrono::Utc::now() - chrono::Duration::minutes(5);
    let t2 = t1 + chrono::Duration::minutes(1);
    let (settings_sender, mut messages, poller) = start_poller(
        &db.url,
        PollSettings {
            at: Some(t1),
            ..settings(Duration::from_millis(200))
        },
    );
    let first = next_snapshot(&mut messages).await;
    assert_eq!(first.finance.as_ref().and_then(|f| f.at), Some(t1));
    assert!(
        first.notifications != Notifications::Arriving,
        "the past sends no notifications to listen for"
    );

    // Seven intervals pass: the past does not change, so nothing is read again.
    assert!(
        next(&mut messages, Duration::from_millis(1_400))
            .await
            .is_none(),
        "polled the same instant again"
    );

    // The responder steps the instant: one read, at the new instant.
    settings_sender
        .send(PollSettings {
            at: Some(t2),
            ..settings(Duration::from_millis(200))
        })
        .unwrap();
    let stepped = next_snapshot(&mut messages).await;
    assert_eq!(stepped.finance.as_ref().and_then(|f| f.at), Some(t2));
    poller.abort();
}

// ---------------------------------------------------------------------------
// What applies to each row, read with the rows.

#[tokio::test]
async fn each_poll_carries_what_the_ledger_refuses_for_every_effect_shown() {
    let db = common::test_db().await;
    let mut held_behind = common::intent("refund:held", "invoice:H");
    let holder = common::intent("refund:holder", "invoice:H");
    effectwatch::ledger::writer::begin_effect(&db.pool, &holder)
        .await
        .unwrap();
    held_behind.requested_by = "agent-2".into();
    effectwatch::ledger::writer::begin_effect(&db.pool, &held_behind)
        .await
        .unwrap();
    let pool = effectwatch::ledger::connect(&ConnectSettings::new(db.url.clone()))
        .await
        .unwrap();

    let snapshot = poller::poll(&pool, &settings(Duration::from_secs(2)))
        .await
        .unwrap();
    let held = &snapshot
        .applicability
        .get("refund:held")
        .expect("the held pane's effect has its refusals")
        .refused;
    let refused: Vec<&str> = held.keys().map(String::as_str).collect();
    assert_eq!(
        refused,
        [
            "acknowledge_duplicates",
            "compensate",
            "reopen_duplicates",
            "resolve"
        ]
    );
    assert_eq!(held["compensate"], "only a succeeded effect is compensated");
    // An effect no view lists is not read.
    assert!(!snapshot.applicability.contains_key("refund:holder"));
}

#[tokio::test]
async fn a_live_console_keeps_its_finance_review_between_readings_and_says_when_it_was_read() {
    let db = common::test_db().await;
    let (_settings, mut messages, poller) =
        start_poller(&db.url, settings(Duration::from_millis(100)));
    let first = next_snapshot(&mut messages).await;
    let reviewed = first.finance.clone().expect("the first poll reads finance");
    assert!(reviewed.exposure.is_empty(), "{:?}", reviewed.exposure);

    // Money moves into an unknown effect: the panes show it at the next
    // poll, the finance review (read every half minute) does not yet.
    let intent = common::intent("refund:LATER:v1", "invoice:LATER");
    common::settle(&db.pool, &intent, Outcome::Unknown).await;
    let later = loop {
        let snapshot = next_snapshot(&mut messages).await;
        if snapshot
            .counts
            .iter()
            .any(|(pane, n)| *pane == Pane::Unknown && *n == 1)
        {
            break snapshot;
        }
    };
    let kept = later.finance.expect("the last review is carried");
    assert_eq!(
        kept.read_at, reviewed.read_at,
        "read again within the half minute"
    );
    assert!(kept.exposure.is_empty());
    // The review itself, read now, has the money at risk.
    let fresh = poller::poll(&db.pool, &settings(Duration::from_millis(100)))
        .await
        .unwrap()
        .finance
        .unwrap();
    assert_eq!(fresh.exposure.len(), 1, "{:?}", fresh.exposure);
    assert!(fresh.read_at > reviewed.read_at);
    poller.abort();
}

/// An action the console settled may move money (a compensation): the
/// review is read again at the next poll, not up to half a minute later.
#[tokio::test]
async fn a_settled_action_reads_the_finance_review_again_at_once() {
    let db = common::test_db().await;
    let (settings_sender, mut messages, poller) =
        start_poller(&db.url, settings(Duration::from_millis(100)));
    let reviewed = next_snapshot(&mut messages)
        .await
        .finance
        .expect("the first poll reads finance");
    let intent = common::intent("refund:SETTLED:v1", "invoice:SETTLED");
    common::settle(&db.pool, &intent, Outcome::Unknown).await;
    // The console settled something: its settings say so.
    settings_sender
        .send(PollSettings {
            settled_actions: 1,
            ..settings(Duration::from_millis(100))
        })
        .unwrap();
    let fresh = loop {
        let snapshot = next_snapshot(&mut messages).await;
        let finance = snapshot.finance.expect("a review is carried");
        if finance.read_at > reviewed.read_at {
            break finance;
        }
    };
    assert_eq!(fresh.exposure.len(), 1, "{:?}", fresh.exposure);
    poller.abort();

    // The console counts what it settled, and only what succeeded.
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    let release = || {
        Request::on_effect(
            &verbs::RELEASE,
            "refund:SETTLED:v1",
            Some(1),
            Answers::because("holder settled"),
        )
    };
    app.update(Message::Settled {
        request: release(),
        result: Err("refused".into()),
    });
    app.update(Message::Settled {
        request: release(),
        result: Ok(effectwatch::settle::Settled {
            summary: "released".into(),
            detail: json!({ "state": "pending", "version": 2 }),
        }),
    });
    assert_eq!(app.poll_settings().settled_actions, 1);
}

#[tokio::test]
async fn a_failed_finance_review_is_not_tried_again_at_every_poll() {
    let db = common::test_db().await;
    // A review that fails, as one slower than the statement timeout does.
    sqlx::query("alter function ledger.exposure_at rename to exposure_at_gone")
        .execute(&db.pool)
        .await
        .unwrap();
    let (_settings, mut messages, poller) =
        start_poller(&db.url, settings(Duration::from_millis(100)));
    let first = next_snapshot(&mut messages).await;
    let error = first.finance_error.clone().expect("the failure is shown");
    // Mended at once: a console that read it again at every poll would show
    // a review at the next one; this one shows the failure until its half
    // minute is up, and its panes meanwhile stay fresh.
    sqlx::query("alter function ledger.exposure_at_gone rename to exposure_at")
        .execute(&db.pool)
        .await
        .unwrap();
    for _ in 0..5 {
        let later = next_snapshot(&mut messages).await;
        assert_eq!(later.finance, None);
        assert_eq!(later.finance_error.as_deref(), Some(error.as_str()));
        assert!(later.polled_at > first.polled_at);
    }
    poller.abort();
}
