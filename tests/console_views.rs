//! Every console view drawn into a `TestBackend` from fixed data and kept as
//! an insta snapshot: what an operator sees, reviewable in a diff. Hostile
//! ledger text is checked cell by cell: nothing a terminal would obey may
//! reach the screen.

mod fixtures;

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Modifier;
use serde_json::json;

use effectwatch::console::app::{App, Message, Settings, Shown, Snapshot};
use effectwatch::console::theme::{Role, Theme};
use effectwatch::console::views;
use effectwatch::ledger::actions::Applicability;
use effectwatch::ledger::panes::{Pane, PaneRows};
use effectwatch::settle::verbs::{self, Answers};
use effectwatch::settle::{Request, Settled};

const WIDTH: u16 = 140;
const HEIGHT: u16 = 30;

// ---------------------------------------------------------------------------
// Fixed data: the console's own fixtures (also behind the screenshots and
// the render benchmark), at one fixed instant.

/// Overdue items in the first pane: enough to look busy, fewer than a page.
const OVERDUE: usize = 12;

fn full_snapshot() -> Snapshot {
    fixtures::snapshot(OVERDUE)
}

fn empty_snapshot() -> Snapshot {
    Snapshot {
        panes: Pane::ALL
            .iter()
            .map(|pane| {
                let rows = match pane {
                    Pane::Overdue => PaneRows::Overdue(Vec::new()),
                    Pane::Unknown => PaneRows::Unknown(Vec::new()),
                    Pane::Duplicates => PaneRows::Duplicates(Vec::new()),
                    Pane::Held => PaneRows::Held(Vec::new()),
                };
                (*pane, rows)
            })
            .collect(),
        counts: Pane::ALL.iter().map(|pane| (*pane, 0)).collect(),
        replays_only: None,
        escalations: Vec::new(),
        approvals: Vec::new(),
        audit: Vec::new(),
        escalation_count: None,
        audit_count: None,
        notifications: effectwatch::console::app::Notifications::Arriving,
        server: None,
        finance: None,
        ..fixtures::snapshot(0)
    }
}

// ---------------------------------------------------------------------------
// Driving the app and reading the screen.

fn app_with(snapshot: Snapshot, read_only: bool) -> App {
    app_with_settings(
        snapshot,
        Settings::new("alice", read_only, Duration::from_secs(2)),
    )
}

fn app_with_settings(snapshot: Snapshot, settings: Settings) -> App {
    let mut app = App::new(settings);
    app.update(Message::Snapshot(Box::new(snapshot)));
    app
}

/// Alice's settings, with what a test changes.
fn alice() -> Settings {
    Settings::new("alice", false, Duration::from_secs(2))
}

fn past_instant() -> chrono::DateTime<chrono::Utc> {
    chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 2026, 11, 30, 13, 0, 0).unwrap()
}

fn press(app: &mut App, code: KeyCode) {
    app.update(Message::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

fn type_text(app: &mut App, text: &str) {
    for ch in text.chars() {
        press(app, KeyCode::Char(ch));
    }
}

fn render(app: &App, theme: &Theme) -> Buffer {
    render_sized(app, theme, WIDTH, HEIGHT)
}

fn render_sized(app: &App, theme: &Theme, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|frame| views::draw(frame, app, theme))
        .unwrap();
    terminal.backend().buffer().clone()
}

/// The screen as text, one line per row, trailing blanks dropped. Every
/// symbol the views use is one cell wide, so a character's index in a line
/// is its column.
fn text(buffer: &Buffer) -> String {
    columns(buffer, 0, buffer.area.width)
}

/// The text of columns `from..to` of each row.
fn columns(buffer: &Buffer, from: u16, to: u16) -> String {
    (0..buffer.area.height)
        .map(|y| {
            let line: String = (from..to).map(|x| buffer[(x, y)].symbol()).collect();
            line.trim_end().to_string() + "\n"
        })
        .collect()
}

fn screen(app: &App) -> String {
    text(&render(app, &Theme::default()))
}

fn line_with<'a>(screen: &'a str, needle: &str) -> &'a str {
    screen
        .lines()
        .find(|line| line.contains(needle))
        .unwrap_or_else(|| panic!("no line contains {needle:?} in\n{screen}"))
}

/// Every cell must be safe to send to a terminal.
fn assert_terminal_safe(buffer: &Buffer) {
    for (index, cell) in buffer.content.iter().enumerate() {
        for ch in cell.symbol().chars() {
            let bidi = matches!(ch,
                '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
                | '\u{061C}' | '\u{FEFF}');
            assert!(
                !ch.is_control() && !bidi,
                "cell {index} holds {ch:?} (U+{:04X})",
                ch as u32
            );
        }
    }
}

// ---------------------------------------------------------------------------
// One snapshot per view.

/// The most urgent overdue item, the one selected first.
fn first_overdue_key() -> String {
    fixtures::overdue_rows(1)[0].op_key.clone()
}

#[test]
fn overdue_pane() {
    let app = app_with(full_snapshot(), false);
    let screen = screen(&app);
    insta::assert_snapshot!("overdue_pane", screen);
    assert!(line_with(&screen, &first_overdue_key()).starts_with("▶ "));
    assert!(line_with(&screen, " of 12").ends_with(" 1 of 12"));
    assert!(line_with(&screen, " 1 Overdue").contains(" 1 Overdue (12) "));
}

#[test]
fn unknown_pane() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('2'));
    let screen = screen(&app);
    insta::assert_snapshot!("unknown_pane", screen);
    assert!(line_with(&screen, "refund:INV-448:AP-77:v1").contains("⚑ duplicate"));
    assert!(line_with(&screen, "refund:INV-402:AP-91:v1").contains("✗ never"));
    assert!(line_with(&screen, "refund:INV-433:AP-40:v2").contains("2× last indeter"));
}

#[test]
fn duplicates_pane() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('3'));
    let screen = screen(&app);
    insta::assert_snapshot!("duplicates_pane", screen);
    assert!(line_with(&screen, "refund:INV-402:AP-91:v1").contains("✗ 1"));
    assert!(line_with(&screen, "webhook:evt_1Q8xK2L").contains("✓ 0"));
}

/// Keys only replayed are counted in the pane's title, not listed: the
/// pane lists what needs a person, and says why for each.
#[test]
fn the_duplicates_pane_counts_the_keys_only_replayed() {
    let snapshot = Snapshot {
        replays_only: Some(431),
        ..full_snapshot()
    };
    let mut app = app_with(snapshot, false);
    press(&mut app, KeyCode::Char('3'));
    let screen = screen(&app);
    assert!(
        line_with(&screen, "Duplicate attempts")
            .contains("431 keys only replayed not listed (v lists them)"),
        "{screen}"
    );
    assert!(line_with(&screen, "refund:INV-402:AP-91:v1").contains("mismatch"));
    assert!(line_with(&screen, "webhook:evt_1Q8xK2L").contains("replays only"));
}

#[test]
fn held_pane() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('4'));
    let screen = screen(&app);
    insta::assert_snapshot!("held_pane", screen);
    let row = line_with(&screen, "refund:INV-402:AP-92:v1");
    assert!(row.contains("→ refund:INV-402:AP-91:v1"), "{row}");
}

#[test]
fn escalations_view() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('5'));
    let screen = screen(&app);
    insta::assert_snapshot!("escalations", screen);
    assert!(line_with(&screen, "oncall").contains("✉ delivered"));
    assert!(line_with(&screen, "finance").contains("✗ failed"));
}

#[test]
fn audit_view() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('6'));
    let screen = screen(&app);
    insta::assert_snapshot!("audit_log", screen);
    assert!(line_with(&screen, "42").contains("reconcile"));
    // Cut at the column; the entry itself (Enter) shows it whole.
    assert!(screen.contains("holder confirmed failed by the"));
}

/// Opens the fixture history from the unknown pane, where its key is first.
fn app_with_detail() -> App {
    app_with_detail_of(fixtures::history())
}

/// The detail of the unknown pane's first effect, as its history arrives.
fn app_with_detail_of(history: effectwatch::ledger::history::EffectHistory) -> App {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('2'));
    press(&mut app, KeyCode::Enter);
    let key = history.effect.op_key.clone();
    assert_eq!(app.detail().unwrap().op_key, key);
    app.update(Message::Detail(key, Ok(Box::new(history))));
    app
}

#[test]
fn detail_view() {
    let app = app_with_detail();
    let screen = screen(&app);
    insta::assert_snapshot!("detail", screen);
    // The mismatch names the field that differs (wrapped onto the next
    // row, under its value).
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines.iter().position(|l| l.contains("mismatch ⚑")).unwrap();
    let timeline = lines[at].find("11-30").unwrap();
    assert!(
        lines[at..=at + 2]
            .iter()
            .map(|line| line.get(timeline..).unwrap_or("").trim())
            .collect::<Vec<_>>()
            .join(" ")
            .contains("/amount_minor: 15000 → 16000"),
        "{screen}"
    );
    assert!(screen.contains("pending → unknown"));
    assert!(screen.contains("indeterminate at stripe-eu"));
    assert!(screen.contains("#37 reconcile by alice"));
}

#[test]
fn detail_scrolls_to_what_is_below_the_fold() {
    let mut app = app_with_detail();
    // On 30 rows the other effects on the target are below the fold.
    assert!(!screen(&app).contains("other effects on this target"));
    for _ in 0..5 {
        press(&mut app, KeyCode::Down);
    }
    let screen = screen(&app);
    assert!(screen.contains("other effects on this target"), "{screen}");
    assert!(
        line_with(&screen, "  ‖ held").contains("refund:INV-402:AP-92:v1"),
        "{screen}"
    );
}

#[test]
fn detail_view_on_a_narrow_terminal() {
    let app = app_with_detail();
    let screen = text(&render_sized(&app, &Theme::default(), 100, 50));
    insta::assert_snapshot!("detail_narrow", screen);
    // One column: the record, then its timeline below.
    let record = screen.find("external ref").unwrap();
    let timeline = screen.find("timeline").unwrap();
    assert!(record < timeline);
}

#[test]
fn detail_while_loading_and_after_an_error() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Enter);
    assert!(screen(&app).contains("loading…"));
    let key = app.detail().unwrap().op_key.clone();
    app.update(Message::Detail(key, Err("statement timeout".to_string())));
    assert!(screen(&app).contains("✗ statement timeout"));
}

#[test]
fn help_overlay() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('?'));
    let screen = screen(&app);
    insta::assert_snapshot!("help", screen);
    assert!(screen.contains("Keys — Overdue pending"));
    assert!(screen.contains("✎ compensate: reverse it"));
    // Escalation-only keys belong to the escalations view's help.
    assert!(!screen.contains("acknowledge an escalation"));
}

/// Every key of the view and the footer must be visible. Today the overlay
/// is capped at 30 rows (views/mod.rs) while its content needs 37, so the
/// last keys and the footer are cut off at any terminal size.
#[test]
fn help_shows_every_key_and_its_footer() {
    let mut app = app_with(full_snapshot(), true);
    press(&mut app, KeyCode::Char('?'));
    for height in [HEIGHT, 50] {
        let screen = text(&render_sized(&app, &Theme::default(), WIDTH, height));
        assert!(screen.contains("reject a compensation"), "{screen}");
        assert!(screen.contains("any key closes this help"), "{screen}");
        assert!(
            screen.contains("disabled: this console is READ-ONLY"),
            "{screen}"
        );
    }
}

#[test]
fn help_in_read_only_marks_writing_actions_disabled() {
    let mut app = app_with(full_snapshot(), true);
    press(&mut app, KeyCode::Char('?'));
    let buffer = render(&app, &Theme::default());
    let screen = text(&buffer);
    insta::assert_snapshot!("help_read_only", screen);
    // Each writing action's description is struck through; the others are not.
    let crossed = |needle: &str| {
        let (row, line) = screen
            .lines()
            .enumerate()
            .find(|(_, line)| line.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not in help"));
        let column = line[..line.find(needle).unwrap()].chars().count();
        buffer[(column as u16, row as u16)]
            .modifier
            .contains(Modifier::CROSSED_OUT)
    };
    assert!(crossed("compensate: reverse it"));
    assert!(crossed("reconcile: ask the provider"));
    assert!(crossed("release a hold"));
    assert!(!crossed("open the effect"));
    assert!(!crossed("pause / resume polling"));
}

#[test]
fn compensate_dialog() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('c'));
    type_text(&mut app, "customer asked");
    let screen = screen(&app);
    insta::assert_snapshot!("compensate_dialog", screen);
    let key = first_overdue_key();
    let suffix = effectwatch::console::app::key_suffix(&key);
    assert!(
        !suffix.starts_with(':') && suffix != "v1",
        "the version suffix is skipped: {suffix}"
    );
    assert!(screen.contains("type the end of the key"));
    assert!(screen.contains(&format!("the key ends in \"{suffix}\"")));
    let dialog = app.dialog().expect("dialog open");
    assert!(!dialog.confirm_selected, "the default button is Cancel");
}

#[test]
fn dialog_focus_on_cancel_is_highlighted() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('r'));
    let buffer = render(&app, &Theme::default());
    let screen = text(&buffer);
    insta::assert_snapshot!("reconcile_dialog", screen);
    let (row, line) = screen
        .lines()
        .enumerate()
        .find(|(_, line)| line.contains("[ Back ]"))
        .unwrap();
    let cancel = line[..line.find("[ Back ]").unwrap()].chars().count() as u16;
    let confirm = line[..line.find("[ Confirm ]").unwrap()].chars().count() as u16;
    let theme = Theme::default();
    assert_eq!(buffer[(cancel + 2, row as u16)].bg, theme.selection_bg);
    assert_ne!(buffer[(confirm + 2, row as u16)].bg, theme.selection_bg);
}

#[test]
fn filter_editing() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('/'));
    type_text(&mut app, "target:INV-4");
    let screen = screen(&app);
    insta::assert_snapshot!("filter_editing", screen);
    assert!(line_with(&screen, "/target:INV-4▏").contains("Enter apply"));
}

#[test]
fn empty_pane() {
    let app = app_with(empty_snapshot(), false);
    let screen = screen(&app);
    insta::assert_snapshot!("empty_pane", screen);
    assert!(screen.contains("✓ nothing in overdue pending"));
}

#[test]
fn waiting_for_the_first_poll() {
    let app = App::new(Settings::new("alice", false, Duration::from_secs(2)));
    let screen = screen(&app);
    insta::assert_snapshot!("connecting", screen);
    assert!(screen.contains("◌ connecting"));
    assert!(screen.contains("waiting for the first poll…"));
    // Nothing is known yet: no tab may read as an all-clear.
    assert!(
        screen.contains("1 Overdue (?)") && !screen.contains("(0)"),
        "{screen}"
    );
}

#[test]
fn a_console_without_answers_names_the_server_it_waits_on() {
    let server = Some("db.internal:5432/ledger".to_string());
    let app = App::new(Settings {
        server: server.clone(),
        ..alice()
    });
    let header = screen(&app).lines().next().unwrap().to_string();
    assert!(
        header.contains("◌ connecting · db.internal:5432/ledger"),
        "{header}"
    );
    let live = app_with_settings(full_snapshot(), Settings { server, ..alice() });
    let header = screen(&live).lines().next().unwrap().to_string();
    assert!(
        !header.contains("db.internal"),
        "named only while it does not answer: {header}"
    );
}

#[test]
fn stale_connection_header() {
    let mut app = app_with(full_snapshot(), false);
    let error = "cannot reach the database: connection refused";
    // The failure is noticed now, but the header is stale for as long as
    // the data is old: a fixed age, so it reads the same on every run.
    app.update(Message::PollFailed(error.to_string()));
    app.set_data_age(Duration::from_secs(75));
    let screen = screen(&app);
    insta::assert_snapshot!("stale_header", screen);
    assert!(line_with(&screen, "effectwatch").contains("✗ stale for 1m15s · reconnecting"));
    assert!(screen.contains("last poll failed: cannot reach the database"));
    // The data of the last good poll stays on screen.
    assert!(screen.contains(&first_overdue_key()));
}

#[test]
fn read_only_badge() {
    let app = app_with(full_snapshot(), true);
    let screen = screen(&app);
    insta::assert_snapshot!("read_only", screen);
    assert!(line_with(&screen, "effectwatch").contains("READ-ONLY"));
    let keys = screen.lines().rev().find(|l| !l.is_empty()).unwrap();
    assert!(
        keys.contains("filter") && !keys.contains("compensate"),
        "{keys}"
    );
}

/// The light theme: the same text, so the snapshot also records the style
/// of each run of cells.
#[test]
fn light_theme() {
    let app = app_with(full_snapshot(), false);
    let theme = Theme::built_in("light").unwrap();
    let buffer = render(&app, &theme);
    insta::assert_snapshot!("light_theme", styled(&buffer, 7));
    assert_eq!(text(&buffer), screen(&app), "themes change colours only");
    assert_eq!(buffer[(1, 0)].bg, theme.header_bg);
}

/// The first `rows` rows as runs of equally styled cells.
fn styled(buffer: &Buffer, rows: u16) -> String {
    let mut out = String::new();
    for y in 0..rows {
        let mut run = String::new();
        let mut style = None;
        let flush = |out: &mut String, run: &str, style: Option<(String, String, Modifier)>| {
            if let Some((fg, bg, modifier)) = style {
                out.push_str(&format!("{run:?} fg={fg} bg={bg} {modifier:?}\n"));
            }
        };
        for x in 0..buffer.area.width {
            let cell = &buffer[(x, y)];
            let this = (
                format!("{}", cell.fg),
                format!("{}", cell.bg),
                cell.modifier,
            );
            if style.as_ref() != Some(&this) {
                flush(&mut out, &run, style.take());
                run.clear();
                style = Some(this);
            }
            run.push_str(cell.symbol());
        }
        flush(&mut out, &run, style);
        out.push_str("--\n");
    }
    out
}

// ---------------------------------------------------------------------------
// Hostile ledger text.

const CLEAR_SCREEN: &str = "\x1b[2J";
const OSC52: &str = "\x1b]52;c;ZXZpbA==\x07";
const RLO: &str = "\u{202e}";

fn long_value() -> String {
    // 500 characters that show where a cut happened.
    (0..50).map(|i| format!("{:09}|", i * 10)).collect()
}

fn hostile_key() -> String {
    format!("pay:{CLEAR_SCREEN}x{OSC52}y{RLO}gnp.exe")
}

fn hostile_target() -> String {
    format!("acct:{RLO}{CLEAR_SCREEN}{}", long_value())
}

fn hostile_snapshot() -> Snapshot {
    let mut rows = fixtures::overdue_rows(3);
    rows[0].op_key = hostile_key();
    rows[0].target = hostile_target();
    fixtures::snapshot_with(rows, 3)
}

fn app_with_hostile_detail() -> App {
    let mut app = app_with(hostile_snapshot(), false);
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.detail().unwrap().op_key, hostile_key());
    let mut history = fixtures::history();
    history.effect.op_key = hostile_key();
    history.effect.target = hostile_target();
    history.effect.params = json!({"note": format!("{OSC52}{}", long_value())});
    app.update(Message::Detail(hostile_key(), Ok(Box::new(history))));
    app
}

#[test]
fn hostile_text_never_reaches_the_terminal_in_the_table() {
    let app = app_with(hostile_snapshot(), false);
    let buffer = render(&app, &Theme::default());
    assert_terminal_safe(&buffer);
    let screen = text(&buffer);
    insta::assert_snapshot!("hostile_table", screen);
    let row = line_with(&screen, "gnp.exe");
    assert!(row.contains("[2J"), "the sequence shows as text: {row}");
    // Each control shows as its escape; the key's middle is cut to fit.
    assert!(
        row.contains("\\u{001B}") && row.contains("\\u{202E}"),
        "{row}"
    );
    // The 500-character target is cut to its column, and the cut is marked.
    assert!(row.contains('…'), "{row}");
    assert!(!row.contains("000000250|"), "{row}");
    assert!(row.chars().count() <= WIDTH as usize);
}

#[test]
fn hostile_text_in_the_detail_view_is_safe_and_whole() {
    let app = app_with_hostile_detail();
    // Wide: the record in the left column (62 cells), the timeline beside it.
    let buffer = render(&app, &Theme::default());
    assert_terminal_safe(&buffer);
    insta::assert_snapshot!("hostile_detail", text(&buffer));
    // Wrapped, not cut: the record's rows, joined, hold the whole value
    // (its lines hang under the value, so each is trimmed first).
    let record: String = columns(&buffer, 0, 62).lines().map(str::trim).collect();
    assert!(record.contains(&long_value()), "{record}");
    // Narrow: one column, same guarantee.
    let narrow = render_sized(&app, &Theme::default(), 100, 50);
    assert_terminal_safe(&narrow);
    let joined: String = text(&narrow).lines().map(str::trim).collect();
    assert!(joined.contains(&long_value()), "{joined}");
}

#[test]
fn hostile_text_in_dialogs_and_status_is_safe() {
    let mut app = app_with(hostile_snapshot(), false);
    press(&mut app, KeyCode::Char('c'));
    type_text(&mut app, "why");
    assert_terminal_safe(&render(&app, &Theme::default()));
    press(&mut app, KeyCode::Esc);
    press(&mut app, KeyCode::Char('y'));
    let buffer = render(&app, &Theme::default());
    assert_terminal_safe(&buffer);
    assert!(text(&buffer).contains("control characters: not copied"));
}

#[test]
fn finance_view() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('7'));
    let screen = screen(&app);
    insta::assert_snapshot!("finance", screen);
    assert!(screen.contains("Exposure per currency"));
    assert!(screen.contains("Suspected double effects"));
    assert!(screen.contains("reviewed 14:04:48 UTC"), "{screen}");

    // Under time travel the review is of the instant, whenever it was read.
    let mut app = app_with_settings(
        full_snapshot(),
        Settings {
            at: Some(past_instant()),
            ..alice()
        },
    );
    press(&mut app, KeyCode::Char('7'));
    let past = self::screen(&app);
    let title = line_with(&past, "Exposure per currency");
    assert!(title.contains("as of 2026-11-30 13:00:00 UTC"), "{title}");
    assert!(!title.contains("reviewed"), "{title}");
}

/// A value cut to fit is marked with '…': two keys that differ only at
/// their end must never look the same. Today table.rs truncates each cell
/// to the model's width, and when the columns' minimum widths exceed the
/// terminal, ratatui squeezes them further and cuts silently (overdue pane
/// below ~112 columns; the finance view's suspects table even at 140).
#[test]
fn every_cut_is_marked_even_on_narrow_terminals() {
    let app = app_with(full_snapshot(), false);
    let narrow = text(&render_sized(&app, &Theme::default(), 100, 20));
    for row in fixtures::overdue_rows(OVERDUE) {
        // Keys are cut where they agree: what follows the kind tells rows apart.
        let line = line_with(&narrow, row.op_key.split_once(':').unwrap().1);
        for value in [&row.op_key, &row.target] {
            assert!(
                line.contains(value.as_str()) || line.contains('…'),
                "{value:?} cut without a mark: {line}"
            );
        }
    }
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('7'));
    let finance = screen(&app);
    let suspects: Vec<&str> = finance.lines().filter(|l| l.contains("re_")).collect();
    assert!(!suspects.is_empty(), "{finance}");
    for (line, suspect) in suspects.iter().zip(fixtures::finance().suspected) {
        let end = suspect.op_key.rsplit(':').next().unwrap();
        assert!(
            line.contains(&format!(":{end}")),
            "the end that tells two refunds apart is visible: {line}"
        );
    }
}

#[test]
fn the_header_under_time_travel_says_history_not_live() {
    let app = app_with(full_snapshot(), true);
    let live = screen(&app);
    assert!(live.lines().next().unwrap().contains("● live"), "{live}");
    let mut app = app_with_settings(
        full_snapshot(),
        Settings {
            at: Some(past_instant()),
            ..alice()
        },
    );
    let past = screen(&app);
    let header = past.lines().next().unwrap();
    assert!(header.contains("⏲ history"), "{header}");
    assert!(header.contains("AS OF 2026-11-30 13:00:00 UTC"), "{header}");
    assert!(
        !header.contains("live") && !header.contains("every"),
        "{header}"
    );
    // The instant's keys are offered under time travel only.
    assert!(!live.contains("-1 min"), "{live}");
    let key_bar = past.lines().last().unwrap();
    assert!(
        key_bar.contains("[  -1 min") && key_bar.contains("t  instant"),
        "{key_bar}"
    );
    app.update(Message::Key(crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::Char('t'),
        crossterm::event::KeyModifiers::NONE,
    )));
    let prompt = screen(&app);
    assert!(
        prompt.contains("⏲ ▏  now 2026-11-30T13:00:00Z · Enter travel"),
        "{prompt}"
    );
}

#[test]
fn a_console_that_is_not_listening_says_so() {
    let listening = screen(&app_with(full_snapshot(), false));
    assert!(!listening.lines().next().unwrap().contains("not listening"));
    let deaf = Snapshot {
        notifications: effectwatch::console::app::Notifications::Reconnecting,
        ..full_snapshot()
    };
    let screen_of_deaf = screen(&app_with(deaf, false));
    let header = screen_of_deaf.lines().next().unwrap();
    assert!(header.contains("● live · not listening"), "{header}");
    // Behind a transaction pooler LISTEN is accepted and then dropped: the
    // console must not call itself live-listening, nor merely reconnecting.
    let pooled = Snapshot {
        notifications: effectwatch::console::app::Notifications::Lost,
        ..full_snapshot()
    };
    let screen_of_pooled = screen(&app_with(pooled, false));
    let header = screen_of_pooled.lines().next().unwrap();
    assert!(
        header.contains("● live · notifications do not arrive (a pooler?): polling"),
        "{header}"
    );
}

#[test]
fn a_live_console_whose_poll_is_overdue_says_how_old_its_data_is() {
    let mut app = app_with(full_snapshot(), false);
    assert!(line_with(&screen(&app), "effectwatch").contains("● live"));
    // The database went quiet: the next poll has not answered for 30 s.
    app.set_data_age(Duration::from_secs(30));
    let header = line_with(&screen(&app), "effectwatch").to_string();
    assert!(
        header.contains("⧗ no answer yet · data 30s old"),
        "{header}"
    );
    assert!(!header.contains("● live"), "{header}");
}

#[test]
fn the_about_overlay_wraps_a_long_command_line_at_80_columns() {
    let about = vec![
        ("operator".to_string(), "alice".to_string()),
        ("server".to_string(), "127.0.0.1:5432/ledger".to_string()),
        (
            "second operator".to_string(),
            "effectwatch --config /var/tmp/effectwatch-demo-operator-0123456789abcdef.toml --operator bob"
                .to_string(),
        ),
        ("hostile".to_string(), "\u{1b}[2Jgone".to_string()),
    ];
    let mut app = app_with_settings(full_snapshot(), Settings { about, ..alice() });
    press(&mut app, KeyCode::Char('i'));
    let buffer = render_sized(&app, &Theme::default(), 80, 24);
    assert_terminal_safe(&buffer);
    let screen = text(&buffer);
    insta::assert_snapshot!("about_80x24", screen);
    // Wrapped, not cut: both halves of the command line are on screen.
    assert!(screen.contains("effectwatch --config"), "{screen}");
    assert!(screen.contains("--operator bob"), "{screen}");
    press(&mut app, KeyCode::Char('x'));
    assert_eq!(app.overlay(), None);
    assert!(app.dialog().is_none(), "the key only closed the overlay");
}

#[test]
fn the_dialog_of_cancel_a_hold_backs_out_with_back_not_cancel() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('x'));
    let screen = screen(&app);
    assert!(screen.contains("cancel a hold"), "{screen}");
    assert!(
        screen.contains("[ Back ]") && screen.contains("[ Confirm ]"),
        "{screen}"
    );
    assert!(!screen.contains("[ Cancel ]"), "{screen}");
}

/// A dialog for every item of a pane names the first keys it will touch
/// and how many more, and still shows its buttons whole.
#[test]
fn a_bulk_dialog_names_the_first_keys_it_touches() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('E'));
    let screen = screen(&app);
    let first = first_overdue_key();
    assert!(line_with(&screen, "keys: ").contains(&first), "{screen}");
    assert!(screen.contains("and 9 more"), "{screen}");
    assert!(
        screen.contains("[ Back ]") && screen.contains("[ Confirm ]"),
        "{screen}"
    );
}

#[test]
fn the_resolve_failed_dialog_shows_whether_the_key_may_be_retried() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('f'));
    let before = screen(&app);
    assert!(
        line_with(&before, "retryable (space)").contains("[ ] no: the key stays failed for good"),
        "{before}"
    );
    press(&mut app, KeyCode::Tab);
    press(&mut app, KeyCode::Char(' '));
    let after = screen(&app);
    assert!(
        line_with(&after, "retryable (space)")
            .contains("[x] yes: the same key may be dispatched again"),
        "{after}"
    );
}

#[test]
fn the_key_bar_strikes_out_what_the_ledger_says_cannot_apply_to_the_selection() {
    let mut snapshot = full_snapshot();
    let PaneRows::Overdue(rows) = &snapshot.panes[0].1 else {
        panic!("the fixtures start with the overdue pane");
    };
    let selected = rows[0].op_key.clone();
    // What ledger.refused_actions says of a pending, dispatched effect.
    snapshot.applicability.insert(
        selected,
        Applicability {
            refused: [
                ("compensate", "only a succeeded effect is compensated"),
                ("release", "only a held effect is released"),
            ]
            .into_iter()
            .map(|(action, why)| (action.to_string(), why.to_string()))
            .collect(),
            ..Applicability::default()
        },
    );
    let app = app_with(snapshot, false);
    // Wide enough for every key: a narrower bar shows what applies first.
    let buffer = render_sized(&app, &Theme::default(), 180, HEIGHT);
    let bar = HEIGHT - 1;
    let line = columns(&buffer, 0, 180);
    let line = line.lines().nth(bar as usize).unwrap();
    let struck = |label: &str| {
        let at = line
            .find(label)
            .unwrap_or_else(|| panic!("no {label:?} in {line}"));
        buffer[(at as u16, bar)]
            .modifier
            .contains(Modifier::CROSSED_OUT)
    };
    assert!(struck(" c  compensate"), "{line}");
    assert!(!struck(" r  reconcile"), "{line}");
    assert!(!struck(" o  resolve"), "{line}");
}

#[test]
fn the_compensate_dialog_says_when_a_second_operator_must_approve() {
    let mut snapshot = full_snapshot();
    // The first overdue row is 15.00 EUR; its action's limit 10.00 EUR.
    snapshot.applicability.insert(
        first_overdue_key(),
        Applicability {
            approval_limit_minor: Some(1_000),
            currency: Some("EUR".into()),
            compensation_waits_for_approval: true,
            ..Applicability::default()
        },
    );
    let mut app = app_with(snapshot, false);
    press(&mut app, KeyCode::Char('c'));
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    insta::assert_snapshot!("compensate_dialog_above_the_approval_limit", screen);
    assert!(
        screen.contains("above the approval limit of 10.00 EUR"),
        "{screen}"
    );
}

#[test]
fn an_audit_entry_opens_with_what_it_changed_and_actions_read_whole() {
    let mut snapshot = full_snapshot();
    // Three actions that share a prefix, and one that changed nothing.
    for (entry, action) in snapshot.audit.iter_mut().zip([
        "compensation_result",
        "compensate_request",
        "compensated",
        "annotate",
    ]) {
        entry.action = action.into();
    }
    snapshot.audit[3].after = None;
    let mut app = app_with(snapshot, false);
    press(&mut app, KeyCode::Char('6'));
    let list = screen(&app);
    for action in ["compensation_result", "compensate_request", "compensated "] {
        assert!(list.contains(action), "{action} cut short:\n{list}");
    }
    press(&mut app, KeyCode::Enter);
    let entry = text(&render_sized(&app, &Theme::default(), 80, 24));
    insta::assert_snapshot!("audit_entry_80x24", entry);
    assert!(entry.contains("Audit entry #42"), "{entry}");
    assert!(
        entry.contains("/state: \"unknown\" → \"succeeded\""),
        "{entry}"
    );
    // Any key closes it; the last entry changed nothing and says so.
    press(&mut app, KeyCode::Char('x'));
    press(&mut app, KeyCode::End);
    press(&mut app, KeyCode::Enter);
    assert!(screen(&app).contains("nothing (a note on the record)"));
}

/// Every view at 80×24: the key keeps its head and tail, amounts keep
/// their currency, context columns give way first, and every tab fits.
#[test]
fn every_view_at_80x24() {
    for (digit, name) in [
        ('1', "overdue"),
        ('2', "unknown"),
        ('3', "duplicates"),
        ('4', "held"),
        ('5', "escalations"),
        ('6', "audit"),
        ('7', "finance"),
    ] {
        let mut app = app_with(full_snapshot(), false);
        press(&mut app, KeyCode::Char(digit));
        let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
        insta::assert_snapshot!(format!("{name}_80x24"), screen);
        let tabs = screen.lines().nth(1).unwrap();
        for tab in 1..=7 {
            assert!(
                tabs.contains(&format!("{tab} ")),
                "tab {tab} missing: {tabs}"
            );
        }
        assert!(tabs.contains("Fin 5"), "{name}: {tabs}");
    }
    let app = app_with_detail();
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    insta::assert_snapshot!("detail_80x24", screen);
}

/// Every view at 120×40, the operator's usual second screen.
#[test]
fn every_view_at_120x40() {
    for (digit, name) in [
        ('1', "overdue"),
        ('2', "unknown"),
        ('3', "duplicates"),
        ('4', "held"),
        ('5', "escalations"),
        ('6', "audit"),
        ('7', "finance"),
    ] {
        let mut app = app_with(full_snapshot(), false);
        press(&mut app, KeyCode::Char(digit));
        let screen = text(&render_sized(&app, &Theme::default(), 120, 40));
        insta::assert_snapshot!(format!("{name}_120x40"), screen);
    }
    let app = app_with_detail();
    let screen = text(&render_sized(&app, &Theme::default(), 120, 40));
    insta::assert_snapshot!("detail_120x40", screen);
}

#[test]
fn at_80x24_money_keeps_its_currency_and_the_cut_key_is_in_the_footer() {
    let app = app_with(full_snapshot(), false);
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    let row = line_with(&screen, "▶ ");
    assert!(row.contains("15.00 EUR"), "{row}");
    // The key keeps what tells it apart: the invoice and which refund.
    assert!(row.contains("INV-2024-000813:second"), "{row}");
    let key = first_overdue_key();
    let footer = screen.lines().find(|line| line.contains(" of 12")).unwrap();
    if !row.contains(&key) {
        assert!(
            footer.contains(&key),
            "the whole key is in the footer: {footer}"
        );
    }
}

#[test]
fn a_ledger_whose_writes_a_failover_can_lose_says_so_in_the_header_and_about() {
    let mut snapshot = full_snapshot();
    snapshot.durability = Some(effectwatch::ledger::durability::Verdict {
        risk: Some(effectwatch::ledger::durability::Risk::Failover),
        sentence: "asynchronous replication to 1 standby(s): a failover can lose writes".into(),
        synchronous_standbys: 0,
    });
    let mut app = app_with(snapshot, false);
    let main = screen(&app);
    assert!(
        main.lines()
            .next()
            .unwrap()
            .contains("⚠ not failover-safe (i)"),
        "{main}"
    );
    press(&mut app, KeyCode::Char('i'));
    let about = screen(&app);
    assert!(
        about.contains("⚠ not failover-safe: asynchronous replication to 1 standby(s)"),
        "{about}"
    );
    // A ledger that is safe says nothing in the header.
    let safe = app_with(full_snapshot(), false);
    assert!(!screen(&safe).contains("failover"));
}

#[test]
fn a_console_on_a_replica_says_how_far_behind_it_is_and_when_that_is_stale() {
    let header_of = |lag: f64| {
        let mut snapshot = full_snapshot();
        snapshot.replica_lag = Some(lag);
        // A standby sends no notifications: that is not "not listening".
        snapshot.notifications = effectwatch::console::app::Notifications::Reconnecting;
        let app = app_with(snapshot, false);
        screen(&app).lines().next().unwrap().to_string()
    };
    let caught_up = header_of(0.4);
    assert!(caught_up.contains("· replica, 0.4 s behind"), "{caught_up}");
    assert!(!caught_up.contains("not listening"), "{caught_up}");
    let late = header_of(45.0);
    assert!(late.contains("· replica 45.0 s behind: stale"), "{late}");
    // A failover under way: the replica hears nothing from its primary, and
    // says so before its lag reaches the stale mark.
    let mut snapshot = full_snapshot();
    snapshot.replica_lag = Some(2.5);
    snapshot.primary_heard = Some(false);
    let app = app_with(snapshot, false);
    let cut_off = screen(&app).lines().next().unwrap().to_string();
    assert!(
        cut_off.contains("· replica, primary out of reach, 2.5 s behind"),
        "{cut_off}"
    );
}

/// Under `--at`, `t` opens an empty line that names the instant shown, and
/// an instant that cannot be read says why on that line at once.
#[test]
fn a_refused_instant_says_why_on_the_line_being_typed() {
    let mut app = app_with_settings(
        fixtures::snapshot(3),
        Settings {
            at: Some(chrono::Utc::now() - chrono::Duration::hours(1)),
            ..alice()
        },
    );
    press(&mut app, KeyCode::Char('t'));
    let prompt = screen(&app);
    let line = line_with(&prompt, "Enter travel");
    assert!(line.contains("now 20"), "{line}");
    type_text(&mut app, "yesterday-ish");
    press(&mut app, KeyCode::Enter);
    let refused = screen(&app);
    let line = line_with(&refused, "yesterday-ish");
    assert!(
        line.contains("✗") && line.contains("invalid time"),
        "{line}"
    );
    press(&mut app, KeyCode::Backspace);
    let mending = screen(&app);
    assert!(
        !line_with(&mending, "yesterday-is").contains("✗"),
        "typing again clears it"
    );
}

/// At 80 columns the key bar cannot hold every key: it shows what applies
/// to the selection first and ends with `? more`; wide, it holds them all.
#[test]
fn a_narrow_key_bar_shows_what_applies_first_and_says_more_exist() {
    let app = app_with(full_snapshot(), false);
    let narrow = text(&render_sized(&app, &Theme::default(), 80, 24));
    let bar = narrow.lines().last().unwrap();
    assert!(bar.trim_end().ends_with("?  more"), "{bar}");
    assert!(bar.chars().count() <= 80, "{bar}");
    let wide = text(&render_sized(&app, &Theme::default(), 240, 45));
    let bar = wide.lines().last().unwrap();
    assert!(!bar.contains("more"), "{bar}");
    assert!(
        bar.contains("compensate") && bar.contains("escalate"),
        "{bar}"
    );
}

/// Two keys that differ only at the end, and two that differ only in the
/// middle, never read alike at 80 columns, where every column is at its
/// narrowest; each cut keeps both ends.
#[test]
fn distinct_keys_never_read_alike_in_a_narrow_table() {
    let keys = [
        "refund:INV-DBL:approval-request-1",
        "refund:INV-DBL:approval-request-2",
        "refund:INV-0001-A:approval-request",
        "refund:INV-0002-A:approval-request",
    ];
    let rows: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(n, key)| {
            let mut row = fixtures::overdue_rows(1).remove(0);
            row.op_key = key.to_string();
            row.version = n as i64 + 1;
            row
        })
        .collect();
    let app = app_with(fixtures::snapshot_with(rows, 4), false);
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    let shown: Vec<String> = screen
        .lines()
        .filter(|line| line.contains(" refund "))
        .map(|line| {
            line.trim_start_matches(['▶', ' '])
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(shown.len(), 4, "{screen}");
    for (index, cut) in shown.iter().enumerate() {
        for other in &shown[index + 1..] {
            assert_ne!(cut, other, "two keys read alike:\n{screen}");
        }
    }
    // What tells them apart stays; the prefix all four share goes first.
    assert!(
        shown[0].ends_with("-1") && shown[1].ends_with("-2"),
        "{shown:?}"
    );
    assert!(
        shown[2].contains("0001") && shown[3].contains("0002"),
        "{shown:?}"
    );
}

/// A result too long for the status line is cut with a hint, and the log
/// shows it whole, newest first.
#[test]
fn a_long_result_is_cut_on_the_status_line_and_whole_in_the_log() {
    let mut app = app_with(full_snapshot(), false);
    let long = format!(
        "escalated refund:INV-177 (unknown_outcome): delivered to {}",
        "sink-".repeat(20)
    );
    let settled = |op_key: &str, summary: &str| Message::Settled {
        request: Request::on_effect(
            &verbs::ESCALATE,
            op_key,
            Some(1),
            Answers {
                sink: None,
                ..Answers::because("provider down")
            },
        ),
        result: Ok(Settled {
            summary: summary.into(),
            detail: json!({}),
        }),
    };
    app.update(settled("refund:INV-177", &long));
    app.update(settled("refund:INV-178", "annotated refund:INV-178"));
    app.update(settled("refund:INV-177", &long));
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    let status = line_with(&screen, "escalated refund:INV-177");
    assert!(status.ends_with("(M: whole)"), "{status}");
    press(&mut app, KeyCode::Char('M'));
    let log = text(&render_sized(&app, &Theme::default(), 160, 45));
    assert!(log.contains("Messages, newest first"), "{log}");
    assert!(
        log.contains("sink-sink-sink-sink-sink-sink-sink-sink-sink-sink-"),
        "{log}"
    );
    let newest = log.find("escalated refund:INV-177").unwrap();
    let older = log.find("annotated refund:INV-178").unwrap();
    assert!(newest < older, "newest first:\n{log}");
}

/// The approve dialog says what the second operator approves: the amount
/// and currency, the original effect, who asked and why, the limit.
#[test]
fn the_approve_dialog_says_what_is_approved() {
    // Bob approves: alice asked for it, and may not approve it herself.
    let mut app = app_with_settings(
        fixtures::snapshot(3),
        Settings::new("bob", false, Duration::from_secs(2)),
    );
    press(&mut app, KeyCode::Char('5'));
    for _ in 0..10 {
        if app
            .selected_row()
            .is_some_and(|row| row.id.starts_with("approval:"))
        {
            break;
        }
        press(&mut app, KeyCode::Char('j'));
    }
    press(&mut app, KeyCode::Char('A'));
    let dialog = app.dialog().expect("approve opens a dialog");
    let (note, _) = dialog.note.clone().expect("a note saying what is approved");
    for part in [
        "325.00 GBP",
        "refund:INV-448:AP-77:v1",
        "invoice:INV-448",
        "alice",
        "provider shows the refund twice",
        "approval limit",
    ] {
        assert!(note.contains(part), "{part} missing from: {note}");
    }
}

/// At 160 columns a long key is shown whole: it gets the room before the
/// target column, which had sat half empty beside a middle-cut key.
#[test]
fn a_wide_table_gives_the_key_its_room_first() {
    let key = "booking:room-18:2026-12-23:7.000541-3-2";
    let mut row = fixtures::overdue_rows(1).remove(0);
    row.op_key = key.to_string();
    let app = app_with(fixtures::snapshot_with(vec![row], 1), false);
    let screen = text(&render_sized(&app, &Theme::default(), 160, 45));
    assert!(
        screen
            .lines()
            .any(|line| line.contains(key) && line.contains("▶")),
        "{screen}"
    );
}

/// The first-run hint and a later warning are both on the status line at
/// 80 columns: the warning cut with a pointer to the log, the hint's tail
/// at the right; opening what the hint points to retires it.
#[test]
fn the_first_run_hint_stays_beside_a_newer_warning() {
    let welcome = "demo: agents are at work · i: how a second operator joins · ?: every key";
    let mut app = app_with_settings(
        full_snapshot(),
        Settings {
            hint: Some("i: how a second operator joins · ?: every key".to_string()),
            ..alice()
        },
    );
    app.set_status(welcome, Role::Accent);
    app.update(Message::Notice(
        "desktop notifications unavailable (no session bus at /run/user/0/bus); carrying on without them (said once; --no-notify turns them off)".into(),
    ));
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    let status = line_with(&screen, "desktop notifications");
    assert!(status.contains("(M: whole)"), "{status}");
    assert!(
        status.contains("i: how a second operator joins"),
        "{status}"
    );

    press(&mut app, KeyCode::Char('i'));
    press(&mut app, KeyCode::Esc);
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    assert!(!screen.contains("second operator joins"), "{screen}");
}

/// A value too long for its line wraps under itself, never back at column
/// 0, and words are kept whole where they fit.
#[test]
fn wrapped_values_in_the_detail_and_the_about_box_hang_under_their_value() {
    let long_key =
        "refund:INV-402:AP-91:v1:with-a-suffix-long-enough-to-wrap-twice-at-eighty-columns";
    let mut history = fixtures::history();
    history.effect.target = format!("invoice:{long_key}");
    let app = app_with_detail_of(history);
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines
        .iter()
        .position(|line| line.contains("target  invoice:"))
        .unwrap_or_else(|| panic!("no target line in\n{screen}"));
    let value_column = lines[at].find("invoice:").unwrap();
    let next = lines[at + 1];
    assert!(
        next[..value_column].trim().is_empty() && !next[value_column..].trim().is_empty(),
        "the rest of the target is not under its value:\n{screen}"
    );

    let about = vec![(
        "second operator".to_string(),
        "run effectwatch --database-url postgres://operator@127.0.0.1:5433/ledger on the primary and press ? for every key".to_string(),
    )];
    let mut app = app_with_settings(full_snapshot(), Settings { about, ..alice() });
    press(&mut app, KeyCode::Char('i'));
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    for word in ["primary", "effectwatch", "every"] {
        assert!(
            screen.contains(word),
            "{word} broken across lines:\n{screen}"
        );
    }
}

/// One spec per pane: `effectwatch list` prints the console's columns, in
/// the console's order, with the version to pass to --expect-version after
/// the key, and every row's cells as the console shows them.
#[test]
fn the_command_line_lists_a_pane_with_the_consoles_columns() {
    for rows in [
        PaneRows::Overdue(fixtures::overdue_rows(3)),
        PaneRows::Unknown(fixtures::unknown_rows()),
        PaneRows::Duplicates(fixtures::duplicate_rows()),
        PaneRows::Held(fixtures::held_rows()),
    ] {
        let model = effectwatch::console::model::pane_model(&rows);
        let table = effectwatch::cli::list::render_table(&rows).to_string();
        let cells = |line: &str| -> Vec<String> {
            line.trim_matches('│')
                .split('┆')
                .map(|cell| cell.trim().to_string())
                .collect()
        };
        let lines: Vec<&str> = table.lines().collect();
        let mut expected: Vec<String> = model.columns.iter().map(|c| c.title.to_string()).collect();
        let key = expected
            .iter()
            .position(|title| title == "key" || title == "held key")
            .unwrap();
        // Found by the column the pane's spec marks, not by its title.
        assert!(model.columns[key].key, "{:?}", model.columns[key]);
        assert_eq!(rows.pane().key_column(), key, "{:?}", rows.pane());
        expected.insert(key + 1, "version".to_string());
        assert_eq!(cells(lines[1]), expected, "{table}");
        for (row, line) in model.rows.iter().zip(lines.iter().skip(3)) {
            // The command line cuts a cell at 48 characters.
            let mut wanted: Vec<String> = row
                .cells
                .iter()
                .map(|c| effectwatch::text::truncate(&c.text, 48))
                .collect();
            wanted.insert(key + 1, row.version.unwrap().to_string());
            assert_eq!(cells(line), wanted, "{table}");
        }
    }
}

/// The demo's agents say what they did on the status line while nothing
/// else is said there, and a line of theirs is shown safely.
#[test]
fn work_running_beside_the_console_is_said_when_the_status_line_is_free() {
    let mut app = app_with(full_snapshot(), false);
    app.update(Message::Background(
        "sim: 4 agents · 312 effects \u{1b}[2J· 9 held".to_string(),
    ));
    let buffer = render(&app, &Theme::default());
    assert_terminal_safe(&buffer);
    let screen = text(&buffer);
    let status = line_with(&screen, "sim: 4 agents");
    assert!(status.contains("9 held"), "{status}");
    app.set_status("reconciled refund:1", Role::Ok);
    let screen = text(&render(&app, &Theme::default()));
    assert!(
        !screen.contains("sim: 4 agents"),
        "a message comes first:\n{screen}"
    );
}

// ---------------------------------------------------------------------------
// #46: what the operator decides by is never cut.

/// At 80×24 the held pane keeps the target and the holder's state, and
/// every key shows the words that tell it apart (invoice and which
/// refund, room and date); context (ages, the holder's amount) goes first.
#[test]
fn at_80x24_held_keys_keep_their_distinguishing_tail_and_the_target() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('4'));
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    let header = line_with(&screen, "held key");
    for column in ["target", "held key", "amount", "held by", "holder"] {
        assert!(header.contains(column), "{column} missing: {header}");
    }
    for context in ["held for", "holder age", "holder amount"] {
        assert!(!header.contains(context), "{context} kept: {header}");
    }
    // The held key's and the holder's words that tell them apart: the
    // invoice and which refund; the room, the day and which booking.
    for (held, holder, state) in [
        (&["000813:second"][..], &["000813:first"][..], "unknown"),
        (&["000977:second"], &["000977:first"], "pending"),
        (&["-204:", "12-06:4"], &["-204:", "12-06:3"], "pending"),
        (&["-311:", "12-07:2"], &["-311:", "12-07:1"], "succeeded"),
        (&["466:AP-18:v1"], &["466:AP-17:v1"], "pending"),
    ] {
        let row = line_with(&screen, held[held.len() - 1]);
        let (key, holder_cell) = row.split_once(" → ").unwrap();
        for word in held {
            assert!(key.contains(word), "{word}: {row}");
        }
        for word in holder {
            assert!(holder_cell.contains(word), "{word}: {row}");
        }
        assert!(holder_cell.contains(state), "{state}: {row}");
    }
    let row = line_with(&screen, "000813:second");
    assert!(
        row.contains("223.69 GBP") && row.contains("…-2024-000813"),
        "{row}"
    );
}

/// At 120 columns (the issue's `refund:IN…-13:second`,
/// `booking:r…024605-4-8`) every held key keeps its invoice, room and date.
#[test]
fn at_120_columns_held_keys_keep_their_invoice_room_and_date() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('4'));
    let screen = text(&render_sized(&app, &Theme::default(), 120, 40));
    for held in [
        "2024-000813:second",
        "2024-000977:second",
        "204:2026-12-06:4",
        "311:2026-12-07:2",
        "INV-402:AP-92:v1",
    ] {
        let row = line_with(&screen, held);
        assert!(row.starts_with("▶ ") || row.starts_with("  "), "{row}");
    }
    let header = line_with(&screen, "held key");
    assert!(header.contains("holder age"), "{header}");
}

/// At 80×24 the overdue pane keeps the key's invoice and customer (the
/// issue's `message:C-10…` for every customer), the target and the
/// amount; the requester and how far past its window go first.
#[test]
fn at_80x24_overdue_keys_keep_the_customer_and_the_invoice() {
    let app = app_with(full_snapshot(), false);
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    for row in fixtures::overdue_rows(OVERDUE) {
        let tail = row.op_key.split_once(':').unwrap().1;
        // `INV-2024-000813:second`, `room-204:2026-12-06:4`, `C-1042:welcome`.
        let line = line_with(&screen, tail);
        if let Some(amount) = row.amount_minor {
            let money = effectwatch::format::money(amount, row.currency.as_deref().unwrap());
            assert!(line.contains(&money), "{money}: {line}");
        }
    }
    let header = line_with(&screen, "key ");
    assert!(
        header.contains("target") && header.contains("dispatched"),
        "{header}"
    );
    assert!(!header.contains("requester"), "{header}");
}

/// At 80 columns the header keeps who is operating and whether the data
/// is live; how it was polled gives way first (it stopped at `po`).
#[test]
fn at_80_columns_the_header_keeps_the_operator() {
    let app = app_with(full_snapshot(), false);
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    let header = screen.lines().next().unwrap();
    assert!(header.ends_with("│ alice"), "{header}");
    assert!(header.contains("● live") && header.contains("ops_alice@payments"));
    assert!(header.contains("polled 14:05:00 UTC"), "{header}");
    // Narrower still, the program's name goes before the poll's time.
    let narrow = text(&render_sized(&app, &Theme::default(), 60, 24));
    let header = narrow.lines().next().unwrap();
    assert!(
        header.ends_with("│ alice") && header.contains("● live"),
        "{header}"
    );
    // Wide, every part is there.
    let wide = text(&render_sized(&app, &Theme::default(), 140, 30));
    assert!(
        wide.lines()
            .next()
            .unwrap()
            .contains("(14 ms, every 2.0 s)")
    );
}

/// A figure of the exposure never runs into the next (`1 · 223.69 GBP
/// 106 · 13144.17 GBP`), and the flag of money at risk ends each row.
#[test]
fn at_80_columns_finance_figures_never_run_together() {
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('7'));
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    for currency in ["EUR", "GBP", "JPY"] {
        let row = line_with(&screen, &format!("  {currency}  "));
        assert!(row.ends_with(" ⚑"), "{row}");
        assert!(row.chars().count() <= 80, "{row}");
        // Every figure stands apart: `count · amount CUR`, a gap between.
        let figures: Vec<&str> = row.split(&format!(" {currency} ")).collect();
        assert!(figures.len() >= 3, "{row}");
    }
    let gbp = line_with(&screen, "  GBP  ");
    assert!(gbp.contains(" 106 · 13144.17 GBP "), "{gbp}");
    assert!(gbp.contains(" 1 · 223.69 GBP "), "{gbp}");
}

/// Help at 80×24 is taller than the screen: it says what is below, and
/// j/k, the arrows, PgUp/PgDn and Home/End scroll it to the last key.
#[test]
fn help_at_80x24_scrolls_and_says_there_is_more() {
    let mut app = app_with(full_snapshot(), false);
    let at_80x24 = |app: &App| text(&render_sized(app, &Theme::default(), 80, 24));
    press(&mut app, KeyCode::Char('?'));
    let top = at_80x24(&app);
    insta::assert_snapshot!("help_80x24", top);
    assert!(top.contains("more below"), "{top}");
    assert!(!top.contains("more above"), "{top}");
    let last = "reject a compensation awaiting approval";
    assert!(!top.contains(last), "{top}");
    assert!(top.contains("↑↓ j k PgUp PgDn Home End scroll"), "{top}");
    press(&mut app, KeyCode::End);
    let bottom = at_80x24(&app);
    assert!(bottom.contains(last), "{bottom}");
    assert!(bottom.contains("more above") && !bottom.contains("more below"));
    press(&mut app, KeyCode::Char('k'));
    press(&mut app, KeyCode::Up);
    let up = at_80x24(&app);
    assert!(!up.contains(last) && up.contains("more below"), "{up}");
    press(&mut app, KeyCode::Home);
    assert_eq!(at_80x24(&app), top);
    press(&mut app, KeyCode::Char('j'));
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::PageDown);
    press(&mut app, KeyCode::PageUp);
    let moved = at_80x24(&app);
    assert!(moved.contains("more above") && moved.contains("more below"));
    // Any other key closes it, and does nothing else.
    press(&mut app, KeyCode::Char('x'));
    assert_eq!(app.overlay(), None);
    assert!(app.dialog().is_none());
}

/// A command in the `i` overlay is copied from there: it wraps between
/// its words, never inside a path or a URL; one too long for the room
/// beside its label starts under the label, whole.
#[test]
fn the_about_overlay_never_wraps_a_command_inside_a_path() {
    let path = "/var/tmp/effectwatch-demo-operator-0123456789abcdef.toml";
    let url = "postgres://operator@127.0.0.1:5433/effectwatch_demo_ledger_0123456789abcdef";
    let about = vec![
        (
            "second operator".to_string(),
            format!("effectwatch --config {path} --operator bob"),
        ),
        (
            "MCP gateway".to_string(),
            format!("effectwatch gateway --database-url {url} -- effectwatch mcp-tools"),
        ),
    ];
    let mut app = app_with_settings(full_snapshot(), Settings { about, ..alice() });
    press(&mut app, KeyCode::Char('i'));
    let screen = text(&render_sized(&app, &Theme::default(), 80, 24));
    for whole in [path, url, "--operator bob", "effectwatch mcp-tools"] {
        assert!(screen.contains(whole), "{whole} broken:\n{screen}");
    }
}

/// Where docs/keys.md holds the table generated from the action table.
const KEYS_DOC: &str = "docs/keys.md";
const KEYS_START: &str = "<!-- keys:start -->";
const KEYS_END: &str = "<!-- keys:end -->";

/// The generated part of docs/keys.md, between its markers.
fn keys_doc_table(doc: &str) -> &str {
    let (_, rest) = doc
        .split_once(KEYS_START)
        .unwrap_or_else(|| panic!("{KEYS_DOC} has no {KEYS_START}"));
    let (table, _) = rest
        .split_once(KEYS_END)
        .unwrap_or_else(|| panic!("{KEYS_DOC} has no {KEYS_END} after {KEYS_START}"));
    table
}

/// docs/keys.md shows the keys the console has, as `?` does: the table
/// between its markers is the one the action table generates, so a key
/// added, renamed or reworded in `src/console/action.rs` cannot leave the
/// document behind. `EFFECTWATCH_BLESS=1` writes the generated table there
/// instead of failing.
#[test]
fn the_keys_doc_is_generated_from_the_action_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(KEYS_DOC);
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{KEYS_DOC}: {e}"));
    let generated = format!("\n{}", effectwatch::console::action::keys_markdown());
    if keys_doc_table(&doc) == generated {
        return;
    }
    if std::env::var_os("EFFECTWATCH_BLESS").is_some_and(|bless| bless == "1") {
        let (before, rest) = doc.split_once(KEYS_START).unwrap();
        let (_, after) = rest.split_once(KEYS_END).unwrap();
        std::fs::write(
            &path,
            format!("{before}{KEYS_START}{generated}{KEYS_END}{after}"),
        )
        .unwrap_or_else(|e| panic!("writing {KEYS_DOC}: {e}"));
        return;
    }
    panic!(
        "{KEYS_DOC}'s key table differs from the one src/console/action.rs generates: \
         run `EFFECTWATCH_BLESS=1 cargo test --test console_views` to write it there, and \
         review the diff.\ngenerated:{generated}"
    );
}

/// One word per verb, in the key bar, the help and the key table of
/// docs/keys.md: acknowledge, resolve, release, cancel… (`C clear all` and
/// `Z close` said other words for them). `X` is on the overdue pane's key
/// bar, where it cancels what was never sent.
#[test]
fn the_key_bar_help_and_keys_doc_name_each_verb_alike() {
    use effectwatch::console::action::TABLE;
    let label = |keys: &str| TABLE.iter().find(|e| e.keys == keys).unwrap().label;
    let keys_doc = keys_doc_table(include_str!("../docs/keys.md"));
    for (keys, verb) in [
        ("C", "acknowledge"),
        ("d", "acknowledge"),
        ("K", "acknowledge"),
        ("Z", "resolve"),
        ("o", "resolve"),
        ("f", "resolve"),
        ("L", "release"),
        ("l", "release"),
        ("X", "cancel"),
        ("x", "cancel"),
    ] {
        assert!(label(keys).starts_with(verb), "{keys}: {}", label(keys));
        let line = keys_doc
            .lines()
            .find(|line| line.starts_with(&format!("| `{keys}` |")))
            .unwrap_or_else(|| panic!("{keys} not in {KEYS_DOC}'s key table"));
        assert!(line.contains(verb), "{keys}: {line}");
    }
    let app = app_with(full_snapshot(), false);
    let screen = text(&render_sized(&app, &Theme::default(), 120, 40));
    let bar = screen.lines().last().unwrap();
    assert!(bar.contains(" X  cancel all"), "{bar}");
    let mut app = app_with(full_snapshot(), false);
    press(&mut app, KeyCode::Char('3'));
    let bar = text(&render_sized(&app, &Theme::default(), 120, 40));
    let bar = bar.lines().last().unwrap();
    assert!(bar.contains(" C  acknowledge all"), "{bar}");
    assert!(!bar.contains("clear"), "{bar}");
}
