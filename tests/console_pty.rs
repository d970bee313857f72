//! The real binary in a real pseudo-terminal: it takes the terminal over,
//! shows what workers write to the ledger within a few polls, answers keys,
//! and gives the terminal back as it found it.

mod common;

use common::intent;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{Child, CommandBuilder, PtySize, native_pty_system};

use effectwatch::ledger::Decision;
use effectwatch::ledger::writer::begin_effect;

const ROWS: u16 = 35;
const COLS: u16 = 140;
const ENTER_ALTERNATE: &[u8] = b"\x1b[?1049h";
const LEAVE_ALTERNATE: &[u8] = b"\x1b[?1049l";
/// Generous: the first poll includes connecting; CI machines are slow.
const STARTUP: Duration = Duration::from_secs(30);
/// What a pane's title says between a new filter and its first read.
const READING_NEW_FILTER: &str = "reading the rows of the new filter";

/// The console running in a pty, its output collected by a thread and
/// replayed into a terminal emulator on demand.
struct Console {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    output: Arc<Mutex<Vec<u8>>>,
    reader_done: Arc<AtomicBool>,
    parser: vt100::Parser,
    fed: usize,
    home: tempfile::TempDir,
}

impl Console {
    fn start(database_url: &str, extra: &[&str]) -> Console {
        Console::start_at(tempfile::tempdir().unwrap(), database_url, extra, false)
    }

    /// In `home` (a later console can reuse an earlier one's), with desktop
    /// notifications on or off.
    fn start_at(
        home: tempfile::TempDir,
        database_url: &str,
        extra: &[&str],
        notify: bool,
    ) -> Console {
        let config = home.path().join("config.toml");
        std::fs::write(&config, "").unwrap();
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("opening a pty");
        let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_effectwatch"));
        command.args(["--database-url", database_url]);
        if !notify {
            command.arg("--no-notify");
        }
        command.args([
            "--poll-interval",
            "0.5",
            "--config",
            config.to_str().unwrap(),
        ]);
        command.args(extra);
        command.env_remove("DATABASE_URL");
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
        let output = Arc::new(Mutex::new(Vec::new()));
        let reader_done = Arc::new(AtomicBool::new(false));
        {
            let (output, done) = (output.clone(), reader_done.clone());
            std::thread::spawn(move || {
                // Keeps the master open for as long as the child may write.
                let _master = pair.master;
                let mut chunk = [0u8; 8192];
                loop {
                    match reader.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => output.lock().unwrap().extend_from_slice(&chunk[..n]),
                    }
                }
                done.store(true, Ordering::SeqCst);
            });
        }
        Console {
            child,
            writer,
            output,
            reader_done,
            parser: vt100::Parser::new(ROWS, COLS, 0),
            fed: 0,
            home,
        }
    }

    /// Feeds what arrived since the last call into the emulator.
    fn catch_up(&mut self) {
        let output = self.output.lock().unwrap();
        self.parser.process(&output[self.fed..]);
        self.fed = output.len();
    }

    fn screen_text(&mut self) -> String {
        self.catch_up();
        self.parser.screen().contents()
    }

    fn raw_output(&self) -> Vec<u8> {
        self.output.lock().unwrap().clone()
    }

    async fn wait_for(&mut self, what: &str, timeout: Duration, done: impl Fn(&str) -> bool) {
        let started = Instant::now();
        loop {
            let screen = self.screen_text();
            if done(&screen) {
                return;
            }
            if started.elapsed() > timeout {
                panic!(
                    "{what}: not seen within {timeout:?}; the screen:\n{screen}\nthe log:\n{}",
                    self.log()
                );
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{what}: effectwatch exited ({status:?}) first; the screen:\n{screen}\nthe log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn press(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Waits for the process to end and the last of its output to arrive.
    async fn wait_exit(&mut self, timeout: Duration) -> portable_pty::ExitStatus {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > timeout {
                let _ = self.child.kill();
                panic!(
                    "effectwatch did not exit within {timeout:?}; the screen:\n{}",
                    self.screen_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let drained = Instant::now();
        while !self.reader_done.load(Ordering::SeqCst) && drained.elapsed() < Duration::from_secs(2)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.catch_up();
        status
    }

    /// The HOME this console ran in, for the next one.
    fn take_home(&mut self) -> tempfile::TempDir {
        std::mem::replace(&mut self.home, tempfile::tempdir().unwrap())
    }

    fn log_path(&self) -> PathBuf {
        self.home.path().join(".cache/effectwatch/effectwatch.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// Quits with `q` and checks the terminal was handed back intact.
    async fn quit_and_check_restored(&mut self) {
        self.press("q");
        let status = self.wait_exit(Duration::from_secs(5)).await;
        assert!(status.success(), "exit status {status:?}");
        let raw = self.raw_output();
        let text = String::from_utf8_lossy(&raw);
        assert!(!text.contains("panicked"), "panic text on the terminal");
        let entered = find(&raw, ENTER_ALTERNATE).expect("the alternate screen was entered");
        let left = rfind(&raw, LEAVE_ALTERNATE).expect("the alternate screen was left");
        assert!(
            left > entered,
            "left the alternate screen before entering it"
        );
        let screen = self.parser.screen();
        assert!(!screen.alternate_screen(), "still on the alternate screen");
        assert!(!screen.hide_cursor(), "the cursor is still hidden");
        assert!(
            self.log_path().exists(),
            "logs go to the file under the temporary HOME"
        );
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

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

/// Whether one row of the screen shows both texts.
fn row_with(screen: &str, one: &str, other: &str) -> bool {
    screen
        .lines()
        .any(|line| line.contains(one) && line.contains(other))
}

fn header(screen: &str) -> &str {
    screen.lines().next().unwrap_or("")
}

fn status_line(screen: &str) -> &str {
    screen.lines().nth(ROWS as usize - 2).unwrap_or("")
}

#[tokio::test]
async fn the_console_shows_a_held_conflict_and_restores_the_terminal() {
    let db = common::test_db().await;
    let mut console = Console::start(&db.url, &[]);
    console
        .wait_for("the live header", STARTUP, |screen| {
            header(screen).contains("effectwatch") && header(screen).contains("● live")
        })
        .await;
    console.press("4");
    console
        .wait_for("the held pane", Duration::from_secs(5), |screen| {
            screen.contains("Held conflicts") && screen.contains("✓ nothing in held conflicts")
        })
        .await;

    // A worker writes: two refunds on one invoice, the second is held.
    begin_effect(&db.pool, &intent("refund:PTY:1", "invoice:PTY"))
        .await
        .unwrap();
    let held = begin_effect(&db.pool, &intent("refund:PTY:2", "invoice:PTY"))
        .await
        .unwrap();
    assert_eq!(held.decision, Decision::Held);
    console
        .wait_for("the held key", Duration::from_secs(5), |screen| {
            row_with(screen, "refund:PTY:2", "→ refund:PTY:1")
        })
        .await;
    assert!(console.screen_text().contains(" 4 Held (1) "));

    console.press("?");
    console
        .wait_for("the help", Duration::from_secs(5), |screen| {
            screen.contains("Keys — Held conflicts") && screen.contains("✎ compensate: reverse it")
        })
        .await;
    // With the help open, a key only closes it.
    console.press("q");
    console
        .wait_for("the help closed", Duration::from_secs(5), |screen| {
            !screen.contains("Keys — Held conflicts")
        })
        .await;
    assert!(
        console.child.try_wait().unwrap().is_none(),
        "q with the help open must not quit"
    );

    console.quit_and_check_restored().await;
}

#[tokio::test]
async fn read_only_shows_the_badge_and_refuses_writes() {
    let db = common::test_db().await;
    begin_effect(&db.pool, &intent("refund:RO:1", "invoice:RO"))
        .await
        .unwrap();
    begin_effect(&db.pool, &intent("refund:RO:2", "invoice:RO"))
        .await
        .unwrap();
    let mut console = Console::start(&db.url, &["--read-only"]);
    console
        .wait_for("the read-only badge", STARTUP, |screen| {
            header(screen).contains("● live") && header(screen).contains("READ-ONLY")
        })
        .await;
    console.press("4");
    console
        .wait_for("the held row", Duration::from_secs(5), |screen| {
            screen.contains("▶ invoice:RO")
        })
        .await;
    console.press("c");
    console
        .wait_for("the refusal", Duration::from_secs(5), |screen| {
            status_line(screen).contains("read-only")
        })
        .await;
    let screen = console.screen_text();
    assert!(
        !screen.contains("reason (required)"),
        "no dialog opens:\n{screen}"
    );
    console.quit_and_check_restored().await;
}

#[tokio::test]
async fn an_unreachable_database_shows_a_stale_console_that_quits_cleanly() {
    let mut console = Console::start("postgres://effectwatch@127.0.0.1:1/ledger", &[]);
    console
        .wait_for("the reconnecting header", STARTUP, |screen| {
            let header = header(screen);
            header.contains("effectwatch")
                && (header.contains("stale") || header.contains("connecting"))
        })
        .await;
    console
        .wait_for(
            "the failure in the status line",
            Duration::from_secs(10),
            |screen| status_line(screen).contains("last poll failed"),
        )
        .await;
    console.quit_and_check_restored().await;
}

#[tokio::test]
async fn the_demo_shows_how_a_second_operator_joins_while_it_runs() {
    let db = common::test_db().await;
    let mut console = Console::start(&db.url, &["demo", "--agents", "1", "--rate", "1"]);
    console
        .wait_for("the demo's console", STARTUP, |screen| {
            header(screen).contains("effectwatch")
                && status_line(screen).contains("i: how a second operator joins")
        })
        .await;
    // Said once: the welcome's words, then its keys as the hint.
    let screen = console.screen_text();
    assert_eq!(
        status_line(&screen)
            .matches("i: how a second operator joins")
            .count(),
        1,
        "{}",
        status_line(&screen)
    );
    console.press("i");
    console
        .wait_for("the about overlay", Duration::from_secs(5), |screen| {
            screen.contains("About this console")
                && screen.contains("second operator")
                && screen.contains("--operator bob")
        })
        .await;
    let screen = console.screen_text();
    assert!(screen.contains("demo provider"), "{screen}");
    // Any key closes it and does nothing else.
    console.press("q");
    console
        .wait_for("the overlay closed", Duration::from_secs(5), |screen| {
            !screen.contains("About this console")
        })
        .await;
    assert!(console.child.try_wait().unwrap().is_none());
    console.quit_and_check_restored().await;
}

#[tokio::test]
async fn notifications_that_cannot_be_shown_are_said_once_not_at_every_start() {
    let db = common::test_db().await;
    let unknown = |key: &'static str| {
        let pool = db.pool.clone();
        async move {
            begin_effect(&pool, &intent(key, &format!("invoice:{key}")))
                .await
                .unwrap();
            effectwatch::ledger::writer::mark_dispatched(&pool, key, None, "w")
                .await
                .unwrap();
            effectwatch::ledger::writer::complete_effect(
                &pool,
                key,
                effectwatch::ledger::writer::Outcome::Unknown,
                &effectwatch::ledger::writer::Completion::default(),
            )
            .await
            .unwrap();
        }
    };
    let said = "desktop notifications unavailable";

    // No desktop session here: the first console that tries says so.
    let mut first = Console::start_at(tempfile::tempdir().unwrap(), &db.url, &[], true);
    first
        .wait_for("the live header", STARTUP, |screen| {
            header(screen).contains("● live")
        })
        .await;
    unknown("refund:NOTE:1").await;
    first
        .wait_for("the notice", Duration::from_secs(20), |screen| {
            status_line(screen).contains(said)
        })
        .await;
    first.quit_and_check_restored().await;

    // The next console, for the same operator, logs it and keeps the status line free.
    let mut second = Console::start_at(first.take_home(), &db.url, &[], true);
    second
        .wait_for("the live header", STARTUP, |screen| {
            header(screen).contains("● live")
        })
        .await;
    second.press("2");
    unknown("refund:NOTE:2").await;
    second
        .wait_for(
            "the new unknown effect",
            Duration::from_secs(20),
            |screen| screen.contains("refund:NOTE:2"),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let screen = second.screen_text();
    assert!(!status_line(&screen).contains(said), "{screen}");
    assert!(second.log().contains(said), "{}", second.log());
    second.quit_and_check_restored().await;
}

#[tokio::test]
async fn the_theme_switches_live_and_the_console_says_which() {
    let db = common::test_db().await;
    let mut console = Console::start(&db.url, &["--theme", "dark"]);
    console
        .wait_for("the first poll", STARTUP, |screen| {
            header(screen).contains("● live")
        })
        .await;
    // The header's background, as the terminal was told to paint it.
    let header_background = |console: &mut Console| {
        console.catch_up();
        console
            .parser
            .screen()
            .cell(0, 1)
            .map(|cell| cell.bgcolor())
    };
    let dark = header_background(&mut console);
    assert_eq!(dark, Some(vt100::Color::Rgb(0x26, 0x26, 0x26)));
    console.press("T");
    console
        .wait_for("the theme named", Duration::from_secs(5), |screen| {
            status_line(screen).contains("theme: light")
        })
        .await;
    assert_eq!(
        header_background(&mut console),
        Some(vt100::Color::Rgb(0xda, 0xda, 0xda)),
        "the light theme's header"
    );
    console.quit_and_check_restored().await;
}

/// A long shift, measured: the demo's traffic of fifteen minutes at its
/// default rate (1,800 effects: 20 a second for 90 s), then an operator in
/// a real terminal clears the duplicates pane and the held pane with bulk
/// actions. Prints the keys pressed and the seconds it took; asserts only
/// that both panes end empty and every item was handled (timing is a
/// figure for the record, not a test).
#[tokio::test]
async fn a_long_shift_of_demo_traffic_is_cleared_with_bulk_actions() {
    let db = common::test_db().await;
    let demo = std::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .args([
            "--database-url",
            &db.url,
            "demo",
            "--headless",
            "--no-notify",
        ])
        .args(["--rate", "20", "--duration", "90s", "--seed", "11"])
        .env_remove("DATABASE_URL")
        .output()
        .expect("running the demo");
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let count = |pane: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("select items from ledger.pane_counts where pane = $1")
                .bind(pane)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let effects: i64 = sqlx::query_scalar("select count(*) from ledger.effects")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let (duplicates, replays, held) = (
        count("duplicates").await,
        count("replays").await,
        count("held").await,
    );
    assert!(duplicates > 0 && held > 0, "the demo made no work to clear");

    let mut console = Console::start(&db.url, &[]);
    console
        .wait_for("the console", STARTUP, |screen| {
            screen.contains("Overdue pending")
        })
        .await;
    let mut keys = 0usize;
    let mut press = |console: &mut Console, text: &str| {
        keys += text.chars().count();
        console.press(text);
    };
    let started = Instant::now();
    let reason = "shift handover: reviewed\r";

    press(&mut console, "3");
    console
        .wait_for(
            "the duplicates pane, read",
            Duration::from_secs(10),
            |screen| screen.contains("Duplicate attempts") && screen.contains(" 1 of "),
        )
        .await;
    press(&mut console, "C");
    console
        .wait_for("the clear-all dialog", Duration::from_secs(5), |screen| {
            screen.contains("acknowledge-duplicates")
        })
        .await;
    press(&mut console, reason);
    console
        .wait_for(
            "the duplicates pane cleared",
            Duration::from_secs(60),
            |screen| screen.contains("nothing in duplicate attempts"),
        )
        .await;

    // Held behind a holder that settled: release; the rest: cancel.
    press(&mut console, "4");
    press(&mut console, "/holder:settled\r");
    // Until the filter's rows are read, the previous filter's stay on
    // screen under a title that says so, and a bulk key is refused.
    console
        .wait_for("the filtered held pane", Duration::from_secs(5), |screen| {
            screen.contains("filter: holder:settled") && !screen.contains(READING_NEW_FILTER)
        })
        .await;
    let released_some = !console.screen_text().contains("nothing matches the filter");
    if released_some {
        press(&mut console, "L");
        console
            .wait_for("the release-all dialog", Duration::from_secs(5), |screen| {
                screen.contains("release ") && screen.contains("reason (required)")
            })
            .await;
        press(&mut console, reason);
        // Items whose agents stopped asking add the choice to cancel them
        // instead: Enter passes over it, leaving it unchosen.
        if console.screen_text().contains("cancel instead (space)") {
            press(&mut console, "\r");
        }
        console
            .wait_for("the releases", Duration::from_secs(60), |screen| {
                screen.contains("nothing matches the filter")
            })
            .await;
    }
    press(&mut console, "/\x15\r");
    console
        .wait_for("the whole held pane", Duration::from_secs(5), |screen| {
            !screen.contains("filter: holder:settled") && !screen.contains(READING_NEW_FILTER)
        })
        .await;
    // A cancel releases what the cancelled effect held, and what waited
    // behind that is now held by the one released (a new version, which
    // the bulk action skips as changed since it was read): what is left
    // is cancelled in another pass, as an operator would.
    for pass in 1..=3 {
        if console.screen_text().contains("nothing in held conflicts") {
            break;
        }
        // A key for every item is refused until the rows on screen are the
        // ones it would act on (the unfiltered pane read, the last pass's
        // items read again): pressed again once they show, as the console asks.
        let asked = Instant::now();
        loop {
            press(&mut console, "X");
            console
                .wait_for(
                    "the cancel-all dialog, or the wait for the rows",
                    Duration::from_secs(5),
                    |screen| {
                        (screen.contains("cancel ") && screen.contains("reason (required)"))
                            || status_line(screen).contains("again once they show")
                    },
                )
                .await;
            if console.screen_text().contains("reason (required)") {
                break;
            }
            assert!(
                asked.elapsed() < Duration::from_secs(20),
                "the rows never showed:\n{}",
                console.screen_text()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        press(&mut console, reason);
        let settled = Instant::now();
        while settled.elapsed() < Duration::from_secs(if pass == 3 { 60 } else { 15 }) {
            if console.screen_text().contains("nothing in held conflicts") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    console
        .wait_for("the held pane cleared", Duration::from_secs(5), |screen| {
            screen.contains("nothing in held conflicts")
        })
        .await;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "long shift: {effects} effects; cleared {duplicates} duplicates (and {replays} keys only \
         replayed, counted) and {held} held in {seconds:.1} s with {keys} keys pressed"
    );
    assert_eq!(count("duplicates").await, 0);
    assert_eq!(count("held").await, 0);
    let audited: i64 = sqlx::query_scalar(
        "select count(*) from ledger.audit_log
          where action in ('acknowledge_duplicates', 'release', 'cancel',
                           'release_by_rule', 'cancel_by_rule')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // An operator's cancel may release or cancel, by rule, what the
    // cancelled effect held: each item is still one audit entry.
    assert!(
        audited >= duplicates + held,
        "one audit entry per item: {audited} for {duplicates} + {held}"
    );
    console.quit_and_check_restored().await;
}

/// #46, as the on-call operator found it: in the held pane, one filter
/// read and shown, then a second filter and `L` sent in one write, before
/// the second filter's rows were read. The bulk key acts only on the rows
/// the filter in force returned: refused until they are read, then its
/// dialog counts and names them, and only they change in the ledger.
#[tokio::test]
async fn a_bulk_key_pressed_with_a_new_filter_acts_only_on_that_filters_rows() {
    let db = common::test_db().await;
    let held_behind_a_first = |action: &'static str, key: String, target: String| {
        let pool = db.pool.clone();
        async move {
            for n in 1..=2 {
                // The held one's agent asks once: its one-second window
                // has passed by the time the console shows it.
                let intent = effectwatch::ledger::writer::Intent {
                    action: action.to_string(),
                    pending_window_secs: (n == 2).then_some(1),
                    ..intent(&format!("{key}:{n}"), &target)
                };
                let begun = begin_effect(&pool, &intent).await.unwrap();
                let expected = if n == 1 {
                    Decision::Proceed
                } else {
                    Decision::Held
                };
                assert_eq!(begun.decision, expected, "{key}:{n}");
            }
        }
    };
    for room in 1..=3 {
        held_behind_a_first(
            "booking",
            format!("booking:PTY46:ROOM-{room}"),
            format!("room:{room}"),
        )
        .await;
    }
    for invoice in 1..=2 {
        held_behind_a_first(
            "refund",
            format!("refund:PTY46:INV-{invoice}"),
            format!("invoice:PTY46-{invoice}"),
        )
        .await;
    }
    let bookings = [
        "booking:PTY46:ROOM-1:2",
        "booking:PTY46:ROOM-2:2",
        "booking:PTY46:ROOM-3:2",
    ];
    let refunds = ["refund:PTY46:INV-1:2", "refund:PTY46:INV-2:2"];
    // The held ones' one-second windows pass without another ask.
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let mut console = Console::start(&db.url, &[]);
    console
        .wait_for("the live header", STARTUP, |screen| {
            header(screen).contains("● live")
        })
        .await;
    console.press("4");
    console
        .wait_for("the held pane", Duration::from_secs(10), |screen| {
            screen.contains(" 4 Held (5) ")
        })
        .await;
    console.press("/action:booking\r");
    console
        .wait_for("the bookings, read", Duration::from_secs(10), |screen| {
            status_line(screen).contains("filter: action:booking")
                && bookings.iter().all(|key| screen.contains(key))
                && !screen.contains("refund:PTY46")
        })
        .await;

    // The second filter and the bulk key together, as fast as a person types.
    console.press("/\u{15}action:refund\rL");
    let dialog_of = |count: usize| format!("release {count} items of Held conflicts");
    console
        .wait_for(
            "a refusal or the release-all dialog",
            Duration::from_secs(10),
            |screen| {
                status_line(screen).contains("still being read")
                    || screen.contains(&dialog_of(2))
                    || screen.contains(&dialog_of(3))
            },
        )
        .await;
    let screen = console.screen_text();
    assert!(
        !screen.contains(&dialog_of(3)),
        "the dialog is about the bookings still on screen:\n{screen}"
    );
    if status_line(&screen).contains("still being read") {
        console
            .wait_for("the refunds, read", Duration::from_secs(10), |screen| {
                refunds.iter().all(|key| screen.contains(key)) && !screen.contains("booking:PTY46")
            })
            .await;
        console.press("L");
    }
    console
        .wait_for(
            "the release-all dialog",
            Duration::from_secs(10),
            |screen| screen.contains(&dialog_of(2)),
        )
        .await;
    let screen = console.screen_text();
    assert!(
        screen.contains("matching \"action:refund\""),
        "the dialog names the filter:\n{screen}"
    );
    for key in refunds {
        assert!(screen.contains(key), "the dialog names {key}:\n{screen}");
    }
    assert!(!screen.contains("booking:PTY46"), "{screen}");

    // Their agents have not asked within their windows: the dialog offers to cancel them
    // instead, a field that Enter passes over, unchosen.
    assert!(screen.contains("cancel instead (space)"), "{screen}");
    console.press("the refunds' holders settled\r\r");
    console
        .wait_for("the result", Duration::from_secs(20), |screen| {
            status_line(screen).contains("2 of 2 done")
        })
        .await;
    let states: Vec<(String, String)> = sqlx::query_as(
        "select op_key, state from ledger.effects where op_key like '%:2' order by op_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for (key, state) in &states {
        let expected = if key.starts_with("refund:") {
            "pending"
        } else {
            "held"
        };
        assert_eq!(state, expected, "{key}: {states:?}");
    }
    assert_eq!(states.len(), 5, "{states:?}");
    let released: Vec<String> = sqlx::query_scalar(
        "select op_key from ledger.audit_log where action = 'release' order by op_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(released, refunds, "one audit entry per refund released");
    console.quit_and_check_restored().await;
}
