//! The console's update function without a terminal or a database: keys and
//! snapshots in, state and commands out.

mod fixtures;

use std::time::Duration;

use chrono::{TimeZone, Utc};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use effectwatch::console::action::{Action, Scope, Subject, TABLE};
use effectwatch::console::app::{
    App, Connection, DialogField, Message, Overlay, Prompt, Settings, Shown, Snapshot, Task, View,
    WINDOW,
};
use effectwatch::console::theme::Role;
use effectwatch::ledger::actions::Applicability;
use effectwatch::ledger::escalations::EscalationRow;
use effectwatch::ledger::panes::{Filter, OverdueRow, Pane, PaneRows, Scope as FilterScope};
use effectwatch::settle::verbs::{self, Answers, Outcome};
use effectwatch::settle::{Request, Settled};
use serde_json::json;

const OVERDUE: View = View::Pane(Pane::Overdue);

fn row(op_key: &str, version: i64) -> OverdueRow {
    let at = Utc.with_ymd_and_hms(2026, 3, 14, 9, 0, 0).unwrap();
    OverdueRow {
        op_key: op_key.to_string(),
        effect_id: 1,
        action: "payout".to_string(),
        target: format!("acct:{op_key}"),
        amount_minor: Some(1_000 + version),
        currency: Some("EUR".to_string()),
        provider: None,
        requested_by: "agent".to_string(),
        created_at: at,
        dispatched: true,
        deadline_at: Some(at),
        overdue_ms: 60_000 * version,
        age_ms: 120_000,
        version,
    }
}

fn rows(keys: &[&str]) -> Vec<OverdueRow> {
    keys.iter()
        .enumerate()
        .map(|(index, key)| row(key, index as i64 + 1))
        .collect()
}

fn snapshot(overdue: Vec<OverdueRow>, total: i64, offset: usize) -> Snapshot {
    Snapshot {
        panes: vec![(Pane::Overdue, PaneRows::Overdue(overdue))],
        counts: vec![(Pane::Overdue, total)],
        replays_only: None,
        escalations: vec![EscalationRow {
            escalation_key: "esc:1".to_string(),
            op_key: "b".to_string(),
            sink: "webhook".to_string(),
            decision_needed: "look".to_string(),
            state: "open".to_string(),
            delivery_attempts: 0,
            last_error: None,
            created_by: "ops".to_string(),
            created_at: Utc.with_ymd_and_hms(2026, 3, 14, 9, 0, 0).unwrap(),
            age_ms: 1_000,
            effect_version: 3,
        }],
        approvals: Vec::new(),
        audit: Vec::new(),
        escalation_count: None,
        audit_count: None,
        notifications: effectwatch::console::app::Notifications::Arriving,
        server: None,
        finance: None,
        offsets: [offset, 0, 0, 0],
        // Anything else a snapshot carries, as the fixtures have it.
        ..fixtures::snapshot(0)
    }
}

fn feed(app: &mut App, keys: &[&str]) -> Vec<Task> {
    let overdue = rows(keys);
    let total = overdue.len() as i64;
    app.update(Message::Snapshot(Box::new(snapshot(overdue, total, 0))))
}

fn app_with(keys: &[&str]) -> App {
    app_with_settings(keys, Settings::new("ops", false, Duration::from_secs(2)))
}

fn app_with_settings(keys: &[&str], settings: Settings) -> App {
    let mut app = App::new(settings);
    feed(&mut app, keys);
    app
}

/// A console under `--at` this instant.
fn app_at(keys: &[&str], at: chrono::DateTime<Utc>) -> App {
    app_with_settings(
        keys,
        Settings {
            at: Some(at),
            ..Settings::new("ops", false, Duration::from_secs(2))
        },
    )
}

fn key(app: &mut App, code: KeyCode) -> Vec<Task> {
    app.update(Message::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

fn char(app: &mut App, ch: char) -> Vec<Task> {
    key(app, KeyCode::Char(ch))
}

fn type_text(app: &mut App, text: &str) {
    for ch in text.chars() {
        assert!(char(app, ch).is_empty());
    }
}

fn selected(app: &App) -> (usize, Option<String>) {
    let list = &app.list(app.current_view());
    (list.selected, list.selected_id.clone())
}

fn selected_key(app: &App) -> String {
    app.selected_row()
        .and_then(|row| row.op_key.clone())
        .expect("a row is selected")
}

fn status(app: &App) -> String {
    app.status().map(|s| s.text.clone()).unwrap_or_default()
}

/// The result of `request` as the settling machinery reports it.
fn done(request: Request, summary: &str, detail: serde_json::Value) -> Message {
    Message::Settled {
        request,
        result: Ok(Settled {
            summary: summary.to_string(),
            detail,
        }),
    }
}

fn failed(request: Request, error: &str) -> Message {
    Message::Settled {
        request,
        result: Err(error.to_string()),
    }
}

fn settles(tasks: &[Task]) -> Vec<&Request> {
    tasks
        .iter()
        .filter_map(|task| match task {
            Task::Settle(request) => Some(request),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Selection across refreshes.

#[test]
fn selection_follows_its_item_when_rows_are_reordered_or_inserted_above() {
    let mut app = app_with(&["a", "b", "c", "d"]);
    char(&mut app, 'j');
    char(&mut app, 'j');
    assert_eq!(selected(&app), (2, Some("c".to_string())));

    feed(&mut app, &["y", "d", "x", "c", "a", "b"]);
    assert_eq!(selected(&app), (3, Some("c".to_string())));
    assert_eq!(selected_key(&app), "c");

    feed(&mut app, &["c", "z"]);
    assert_eq!(selected(&app), (0, Some("c".to_string())));
}

#[test]
fn selection_clamps_when_its_item_disappears() {
    let mut app = app_with(&["a", "b", "c", "d", "e"]);
    char(&mut app, 'j');
    char(&mut app, 'j');
    assert_eq!(selected_key(&app), "c");

    // Gone from the middle: the row that took its place.
    feed(&mut app, &["a", "b", "d", "e"]);
    assert_eq!(selected(&app), (2, Some("d".to_string())));

    // Gone from the end: the new last row.
    key(&mut app, KeyCode::End);
    assert_eq!(selected_key(&app), "e");
    feed(&mut app, &["a", "b"]);
    assert_eq!(selected(&app), (1, Some("b".to_string())));

    // Everything settled: nothing selected, and the next item is picked up.
    feed(&mut app, &[]);
    assert_eq!(selected(&app), (0, None));
    assert!(app.selected_row().is_none());
    feed(&mut app, &["n"]);
    assert_eq!(selected(&app), (0, Some("n".to_string())));
}

#[test]
fn each_view_keeps_its_own_selection() {
    let mut app = app_with(&["a", "b", "c"]);
    char(&mut app, 'j');
    char(&mut app, '5');
    assert_eq!(selected(&app), (0, Some("esc:1".to_string())));
    key(&mut app, KeyCode::BackTab);
    key(&mut app, KeyCode::Tab);
    char(&mut app, '1');
    assert_eq!(selected_key(&app), "b");
}

// ---------------------------------------------------------------------------
// Filter, sort, pause, poll interval.

#[test]
fn filter_editing_parses_on_enter_and_repolls() {
    let mut app = app_with(&["a", "b"]);
    assert!(char(&mut app, '/').is_empty());
    assert!(app.editing_filter());
    type_text(&mut app, "target:acct refundx");
    key(&mut app, KeyCode::Backspace);
    assert_eq!(app.filter_text(), "target:acct refund");
    assert!(app.filter().is_empty(), "nothing applies before Enter");

    let commands = key(&mut app, KeyCode::Enter);
    assert_eq!(commands, vec![Task::Repoll]);
    assert!(!app.editing_filter());
    assert_eq!(
        *app.filter(),
        Filter {
            terms: vec![
                (Some("target".to_string()), "acct".to_string()),
                (None, "refund".to_string()),
            ],
            scopes: vec![],
        }
    );
    assert_eq!(*app.offsets(), [0; 4]);
}

#[test]
fn a_field_without_a_value_is_an_error_and_esc_clears() {
    let mut app = app_with(&["a"]);
    char(&mut app, '/');
    type_text(&mut app, "target:");
    assert!(key(&mut app, KeyCode::Enter).is_empty());
    assert!(
        app.editing_filter(),
        "the operator stays in the filter to fix it"
    );
    assert!(app.filter().is_empty());
    let status = app.status().cloned().expect("an error is shown");
    assert_eq!(status.role, Role::Critical);
    assert!(
        status.text.contains("target: needs a value"),
        "{}",
        status.text
    );

    let commands = key(&mut app, KeyCode::Esc);
    assert_eq!(commands, vec![Task::Repoll]);
    assert!(!app.editing_filter());
    assert!(app.filter_text().is_empty());
    assert!(app.filter().is_empty());
}

#[test]
fn esc_outside_the_editor_clears_an_applied_filter() {
    let mut app = app_with(&["a"]);
    char(&mut app, '/');
    type_text(&mut app, "a");
    key(&mut app, KeyCode::Enter);
    assert!(!app.filter().is_empty());
    assert_eq!(key(&mut app, KeyCode::Esc), vec![Task::Repoll]);
    assert!(app.filter().is_empty() && app.filter_text().is_empty());
    assert!(
        key(&mut app, KeyCode::Esc).is_empty(),
        "nothing left to clear"
    );
}

#[test]
fn sort_cycles_columns_reverses_and_keeps_the_selection() {
    // Ledger order: most urgent first, which is not key order.
    let mut app = app_with(&["c", "a", "d", "b"]);
    char(&mut app, 'j');
    char(&mut app, 'j');
    assert_eq!(selected_key(&app), "d");

    assert!(char(&mut app, 's').is_empty());
    assert_eq!(app.list(OVERDUE).sort, Some((0, false)));
    let keys =
        |app: &App| -> Vec<String> { app.model().rows.iter().map(|row| row.id.clone()).collect() };
    assert_eq!(keys(&app), ["a", "b", "c", "d"]);
    assert_eq!(selected(&app), (3, Some("d".to_string())));

    char(&mut app, 'S');
    assert_eq!(app.list(OVERDUE).sort, Some((0, true)));
    assert_eq!(keys(&app), ["d", "c", "b", "a"]);
    assert_eq!(selected(&app), (0, Some("d".to_string())));

    // A refresh keeps the sort and the selection.
    feed(&mut app, &["b", "d", "a", "c", "e"]);
    assert_eq!(keys(&app), ["e", "d", "c", "b", "a"]);
    assert_eq!(selected_key(&app), "d");

    char(&mut app, 's');
    assert_eq!(app.list(OVERDUE).sort, Some((1, false)));
    assert!(
        status(&app).contains("sorted by action"),
        "{}",
        status(&app)
    );

    // Past the last column: back to ledger order, fetched again.
    let columns = app.model().columns.len();
    for _ in 2..columns {
        assert!(char(&mut app, 's').is_empty());
    }
    assert_eq!(app.list(OVERDUE).sort, Some((columns - 1, false)));
    assert_eq!(char(&mut app, 's'), vec![Task::Repoll]);
    assert_eq!(app.list(OVERDUE).sort, None);
    assert_eq!(selected_key(&app), "d");
}

#[test]
fn pause_toggles_and_repolls() {
    let mut app = app_with(&["a"]);
    assert_eq!(char(&mut app, 'p'), vec![Task::Repoll]);
    assert!(app.is_paused());
    assert!(status(&app).contains("paused"));
    assert_eq!(char(&mut app, 'p'), vec![Task::Repoll]);
    assert!(!app.is_paused());
}

#[test]
fn poll_interval_changes_within_bounds() {
    let mut app = app_with(&["a"]);
    assert_eq!(char(&mut app, '+'), vec![Task::Repoll]);
    assert_eq!(app.poll_interval(), Duration::from_secs(1));
    for _ in 0..10 {
        char(&mut app, '+');
    }
    assert_eq!(app.poll_interval(), Duration::from_millis(250));
    for _ in 0..20 {
        assert_eq!(char(&mut app, '-'), vec![Task::Repoll]);
    }
    assert_eq!(app.poll_interval(), Duration::from_secs(300));
    char(&mut app, '=');
    assert_eq!(app.poll_interval(), Duration::from_secs(150));
}

// ---------------------------------------------------------------------------
// Detail.

#[test]
fn enter_opens_the_detail_and_esc_returns_to_the_same_row() {
    let mut app = app_with(&["a", "b", "c"]);
    char(&mut app, 'j');
    let commands = key(&mut app, KeyCode::Enter);
    assert_eq!(commands, vec![Task::LoadDetail("b".to_string())]);
    let detail = app.detail().expect("detail open");
    assert_eq!(detail.op_key, "b");

    // In the detail, arrows scroll it; the list's cursor does not move.
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Down);
    assert_eq!(app.detail().unwrap().scroll, 2);
    // A poll while the detail is open reloads it.
    assert_eq!(
        feed(&mut app, &["x", "a", "b", "c"]),
        vec![Task::LoadDetail("b".to_string())]
    );
    // A load for another key (a stale reply) is ignored.
    app.update(Message::Detail("a".to_string(), Err("late".to_string())));
    assert_eq!(app.detail().unwrap().error, None);

    assert!(key(&mut app, KeyCode::Esc).is_empty());
    assert!(app.detail().is_none());
    assert_eq!(selected(&app), (2, Some("b".to_string())));
}

// ---------------------------------------------------------------------------
// Read-only.

#[test]
fn read_only_refuses_every_writing_action_in_every_view() {
    let writing: Vec<Action> = TABLE
        .iter()
        .filter(|entry| entry.writes)
        .map(|entry| entry.action)
        .collect();
    assert!(writing.len() >= 10, "the table lists the writing actions");
    for view in ['1', '5'] {
        let mut app = App::new(Settings::new("ops", true, Duration::from_secs(2)));
        feed(&mut app, &["a", "b"]);
        char(&mut app, view);
        for action in &writing {
            let said_before = app.messages().len();
            let commands = app.dispatch(*action);
            assert_eq!(
                app.messages().len(),
                said_before + 1,
                "{action:?} said nothing"
            );
            assert!(commands.is_empty(), "{action:?}: {commands:?}");
            assert!(app.dialog().is_none(), "{action:?} opened a dialog");
            let status = status(&app);
            assert!(status.contains("read-only"), "{action:?}: {status:?}");
        }
    }
}

#[test]
fn read_only_refuses_writing_keys_and_allows_reading_ones() {
    let mut app = App::new(Settings::new("ops", true, Duration::from_secs(2)));
    feed(&mut app, &["a", "b"]);
    for ch in ['r', 'R', 'c', 'e', 'o', 'f', 'l', 'x', 'a', 'A', 'D'] {
        assert!(char(&mut app, ch).is_empty(), "{ch}");
        assert!(app.dialog().is_none(), "{ch}");
    }
    assert!(status(&app).starts_with("read-only"));
    // Reading still works.
    assert_eq!(
        key(&mut app, KeyCode::Enter),
        vec![Task::LoadDetail("a".to_string())]
    );
    // ...and writing from the detail is refused too.
    assert!(char(&mut app, 'c').is_empty());
    assert!(app.dialog().is_none());
}

// ---------------------------------------------------------------------------
// Confirmation dialogs.

#[test]
fn the_default_button_is_cancel() {
    let mut app = app_with(&["a"]);
    assert!(char(&mut app, 'r').is_empty());
    let dialog = app.dialog().expect("a dialog for reconcile");
    assert_eq!(dialog.focus, DialogField::Buttons);
    assert!(!dialog.confirm_selected);
    assert!(key(&mut app, KeyCode::Enter).is_empty());
    assert!(app.dialog().is_none());
    assert!(status(&app).contains("nothing written"));

    // Esc, from any field, writes nothing either.
    char(&mut app, 'c');
    type_text(&mut app, "reason");
    assert!(key(&mut app, KeyCode::Esc).is_empty());
    assert!(app.dialog().is_none());
}

#[test]
fn a_reason_is_required() {
    let mut app = app_with(&["a"]);
    char(&mut app, 'e');
    assert_eq!(app.dialog().unwrap().focus, DialogField::Reason);
    // Enter in the last field of a form that is not valid yet says why and stays there:
    // it never lands on Back, where a second Enter would throw typed text away.
    assert!(key(&mut app, KeyCode::Enter).is_empty());
    let dialog = app.dialog().expect("still open");
    assert_eq!(dialog.focus, DialogField::Reason);
    assert_eq!(dialog.error.as_deref(), Some("a reason is required"));

    // Through the buttons the same check holds.
    key(&mut app, KeyCode::Tab);
    key(&mut app, KeyCode::Right);
    assert!(app.dialog().unwrap().confirm_selected);
    assert!(key(&mut app, KeyCode::Enter).is_empty());
    key(&mut app, KeyCode::BackTab);
    type_text(&mut app, "  ");
    assert!(
        key(&mut app, KeyCode::Enter).is_empty(),
        "blank is no reason"
    );
    assert_eq!(app.dialog().unwrap().reason, "  ", "typed text survives");

    // A valid form submits from its last field.
    type_text(&mut app, "bank is down");
    let commands = key(&mut app, KeyCode::Enter);
    let requests = settles(&commands);
    assert_eq!(
        requests,
        [&Request::on_effect(
            &verbs::ESCALATE,
            "a",
            Some(1),
            Answers {
                sink: None,
                ..Answers::because("bank is down")
            }
        )]
    );
}

#[test]
fn compensate_needs_the_end_of_the_key_typed() {
    let mut app = app_with(&["pay:inv-0001", "pay:inv-0042"]);
    char(&mut app, 'j');
    assert!(char(&mut app, 'c').is_empty());
    let dialog = app.dialog().unwrap();
    assert_eq!(dialog.required_suffix.as_deref(), Some("inv-0042"));
    assert_eq!(
        dialog.subject,
        Subject::Effect {
            op_key: "pay:inv-0042".to_string(),
            seen: Some(2)
        }
    );

    type_text(&mut app, "customer asked for a refund");
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.dialog().unwrap().focus, DialogField::KeySuffix);
    type_text(&mut app, "inv-0001");
    key(&mut app, KeyCode::Tab);
    char(&mut app, 'y');
    assert!(app.dialog().unwrap().confirm_selected);
    assert!(key(&mut app, KeyCode::Enter).is_empty());
    let error = app.dialog().unwrap().error.clone().unwrap();
    assert!(error.contains("\"inv-0042\""), "{error}");

    key(&mut app, KeyCode::BackTab);
    for _ in 0..8 {
        key(&mut app, KeyCode::Backspace);
    }
    type_text(&mut app, "inv-0042");
    key(&mut app, KeyCode::Tab);
    let commands = key(&mut app, KeyCode::Enter);
    assert_eq!(
        commands,
        vec![Task::Settle(Request::on_effect(
            &verbs::COMPENSATE,
            "pay:inv-0042",
            Some(2),
            Answers::because("customer asked for a refund")
        ))]
    );
    assert!(app.dialog().is_none());
    // A second Enter does nothing more: exactly one request.
    assert!(settles(&key(&mut app, KeyCode::Enter)).is_empty());
}

#[test]
fn the_version_sent_is_the_one_the_operator_saw() {
    let mut app = app_with(&["a"]);
    char(&mut app, 'r');
    // A poll while the dialog is open brings a newer version.
    let mut newer = rows(&["a"]);
    newer[0].version = 9;
    app.update(Message::Snapshot(Box::new(snapshot(newer, 1, 0))));
    key(&mut app, KeyCode::Right);
    let commands = key(&mut app, KeyCode::Enter);
    assert_eq!(
        settles(&commands),
        [&Request::on_effect(
            &verbs::RECONCILE,
            "a",
            Some(1),
            Answers::default()
        )]
    );
}

#[test]
fn escalation_actions_need_the_escalations_view() {
    let mut app = app_with(&["a"]);
    assert!(char(&mut app, 'K').is_empty());
    assert!(app.dialog().is_none());
    assert!(status(&app).contains("escalation"));
    char(&mut app, '5');
    char(&mut app, 'K');
    type_text(&mut app, "seen");
    key(&mut app, KeyCode::Tab);
    key(&mut app, KeyCode::Right);
    let commands = key(&mut app, KeyCode::Enter);
    assert_eq!(
        settles(&commands),
        [&Request::on_escalation(
            &verbs::ACKNOWLEDGE_ESCALATION,
            "esc:1",
            Answers::because("seen")
        )]
    );
}

#[test]
fn scopes_in_the_table_match_what_the_dispatcher_asks_for() {
    // Every effect-scoped writing action opens a dialog on a selected row.
    for entry in TABLE
        .iter()
        .filter(|entry| entry.writes && entry.scope == Scope::Effect)
    {
        let mut app = app_with(&["a"]);
        app.dispatch(entry.action);
        let dialog = app
            .dialog()
            .unwrap_or_else(|| panic!("{:?} opened no dialog: {}", entry.action, status(&app)));
        assert_eq!(
            dialog.subject,
            Subject::Effect {
                op_key: "a".to_string(),
                seen: Some(1)
            }
        );
        assert!(!dialog.confirm_selected);
    }
}

#[test]
fn reconcile_all_targets_every_row_of_the_filtered_pane() {
    let mut app = app_with(&["a", "b", "c"]);
    char(&mut app, '/');
    type_text(&mut app, "target:acct");
    key(&mut app, KeyCode::Enter);
    // The poller answers the filter with the matching rows only.
    let matching = vec![row("a", 1), row("c", 3)];
    let read = Snapshot {
        filter: app.filter().clone(),
        ..snapshot(matching, 2, 0)
    };
    app.update(Message::Snapshot(Box::new(read)));
    char(&mut app, 'R');
    let dialog = app.dialog().expect("dialog");
    assert!(
        dialog.summary.contains("2 items") && dialog.summary.contains("matching"),
        "{}",
        dialog.summary
    );
    key(&mut app, KeyCode::Right);
    let commands = key(&mut app, KeyCode::Enter);
    let requests = settles(&commands);
    assert_eq!(
        requests,
        [&Request {
            verb: &verbs::RECONCILE,
            subject: Subject::Pane {
                targets: vec![("a".to_string(), 1), ("c".to_string(), 3)]
            },
            answers: Answers::default()
        }]
    );
}

#[test]
fn reconcile_all_on_an_empty_pane_opens_nothing() {
    let mut app = app_with(&[]);
    assert!(char(&mut app, 'R').is_empty());
    assert!(app.dialog().is_none());
}

#[test]
fn a_settled_action_reports_and_repolls() {
    let mut app = app_with(&["a"]);
    let reconcile = || Request::on_effect(&verbs::RECONCILE, "a", Some(1), Answers::default());
    let commands = app.update(done(reconcile(), "reconciled a", json!({})));
    assert_eq!(commands, vec![Task::Repoll]);
    assert_eq!(status(&app), "✓ reconciled a");
    app.update(failed(reconcile(), "version changed"));
    assert_eq!(app.status().unwrap().role, Role::Critical);
}

// ---------------------------------------------------------------------------
// Windows over a large pane.

fn window(offset: usize, total: usize) -> Snapshot {
    let overdue = (offset..(offset + WINDOW).min(total))
        .map(|i| row(&format!("k{i:06}"), 1))
        .collect();
    snapshot(overdue, total as i64, offset)
}

#[test]
fn down_past_a_full_window_fetches_the_next_one() {
    let total = 100_000;
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(window(0, total))));
    assert_eq!(app.total(OVERDUE), total as i64);
    for _ in 0..WINDOW - 1 {
        assert!(key(&mut app, KeyCode::Down).is_empty());
    }
    assert_eq!(selected_key(&app), format!("k{:06}", WINDOW - 1));

    assert_eq!(key(&mut app, KeyCode::Down), vec![Task::Repoll]);
    let advanced = app.offsets()[0];
    assert!(advanced > 0 && advanced < WINDOW, "offset {advanced}");
    assert_eq!(app.offsets()[1..], [0, 0, 0]);

    // The poller's answer: the cursor stays on its item, now mid-window,
    // and the next Down moves on to a row that was not loaded before.
    app.update(Message::Snapshot(Box::new(window(advanced, total))));
    assert_eq!(selected_key(&app), format!("k{:06}", WINDOW - 1));
    assert!(key(&mut app, KeyCode::Down).is_empty());
    assert_eq!(selected_key(&app), format!("k{WINDOW:06}"));

    // Home goes back to the first window.
    assert_eq!(key(&mut app, KeyCode::Home), vec![Task::Repoll]);
    assert_eq!(app.offsets()[0], 0);
}

#[test]
fn up_at_the_top_of_a_later_window_goes_back() {
    let total = 2_000;
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(window(750, total))));
    assert_eq!(key(&mut app, KeyCode::Up), vec![Task::Repoll]);
    assert!(app.offsets()[0] < 750);
}

#[test]
fn down_at_the_very_end_does_nothing() {
    let total = WINDOW + 10;
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(window(10, total))));
    key(&mut app, KeyCode::End);
    assert_eq!(selected_key(&app), format!("k{:06}", total - 1));
    assert!(key(&mut app, KeyCode::Down).is_empty());
    assert_eq!(app.offsets()[0], 10);
}

#[test]
fn end_jumps_to_the_last_window_and_selects_its_last_row() {
    let total = 100_000;
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(window(0, total))));
    assert_eq!(key(&mut app, KeyCode::End), vec![Task::Repoll]);
    assert_eq!(app.offsets()[0], total - WINDOW);
    app.update(Message::Snapshot(Box::new(window(total - WINDOW, total))));
    assert_eq!(selected_key(&app), format!("k{:06}", total - 1));
    assert_eq!(key(&mut app, KeyCode::Home), vec![Task::Repoll]);
    assert_eq!(app.offsets()[0], 0);
}

#[test]
fn a_failed_poll_keeps_the_data_and_marks_it_stale() {
    let mut app = app_with(&["a", "b"]);
    assert!(
        app.update(Message::PollFailed("gone".to_string()))
            .is_empty()
    );
    assert!(matches!(app.connection(), Connection::Stale { .. }));
    assert_eq!(app.model().rows.len(), 2);
    feed(&mut app, &["a"]);
    assert_eq!(*app.connection(), Connection::Live);
}

#[test]
fn quit_and_help() {
    let mut app = app_with(&["a"]);
    assert!(char(&mut app, '?').is_empty());
    assert_eq!(app.overlay(), Some(Overlay::Help));
    // Any key closes the help and does nothing else.
    assert!(char(&mut app, 'q').is_empty());
    assert_eq!(app.overlay(), None);
    assert_eq!(char(&mut app, 'q'), vec![Task::Quit]);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(app.update(Message::Key(ctrl_c)), vec![Task::Quit]);
}

#[test]
fn y_copies_a_plain_key() {
    let mut app = app_with(&["pay:inv-0001", "pay:inv-0042"]);
    char(&mut app, 'j');
    assert_eq!(
        char(&mut app, 'y'),
        vec![Task::Copy("pay:inv-0042".to_string())]
    );
    let status = app.status().cloned().unwrap();
    assert_eq!(status.text, "copied pay:inv-0042");
    assert_eq!(status.role, Role::Ok);
}

#[test]
fn a_key_with_control_characters_is_never_copied() {
    // Pasted into a shell, the newline would run what follows it.
    for hostile in [
        "pay:1\nrm -rf ~",
        "pay:1\r",
        "pay:\x1b[2J",
        "pay:\u{202E}gnp.exe",
    ] {
        let mut app = app_with(&[hostile]);
        assert!(char(&mut app, 'y').is_empty(), "{hostile:?} was copied");
        let status = app.status().cloned().unwrap();
        assert_eq!(
            status.text,
            "this key contains control characters: not copied; use `effectwatch show`"
        );
        assert_eq!(status.role, Role::Warn);
    }
}

#[test]
fn acknowledging_repeats_sends_the_ledgers_call_for_the_version_seen() {
    let mut app = app_with(&["a"]);
    assert!(char(&mut app, 'd').is_empty());
    assert_eq!(
        app.dialog().map(|dialog| dialog.focus),
        Some(DialogField::Reason)
    );
    type_text(&mut app, "agent retried on a timeout");
    key(&mut app, KeyCode::Tab);
    key(&mut app, KeyCode::Right);
    let commands = key(&mut app, KeyCode::Enter);
    assert_eq!(
        settles(&commands),
        [&Request::on_effect(
            &verbs::ACKNOWLEDGE_DUPLICATES,
            "a",
            Some(1),
            Answers::because("agent retried on a timeout")
        )]
    );

    // Read-only: the key is refused before any dialog opens.
    let mut app = App::new(Settings::new("ro", true, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(snapshot(rows(&["a"]), 1, 0))));
    assert!(char(&mut app, 'd').is_empty());
    assert!(app.dialog().is_none());
    assert!(status(&app).contains("read-only"), "{}", status(&app));
}

#[test]
fn a_responder_steps_the_instant_and_never_past_now() {
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 13, 0, 0).unwrap();
    let mut app = app_with(&["a"]);
    // Live: there is no instant to move.
    assert!(char(&mut app, '[').is_empty());
    assert!(status(&app).contains("--at"), "{}", status(&app));
    assert_eq!(app.at(), None);

    let mut app = app_at(&["a"], t0);
    assert!(
        app.is_read_only(),
        "a past instant is no place to write from"
    );
    assert_eq!(char(&mut app, ']'), vec![Task::Repoll]);
    assert_eq!(app.at(), Some(t0 + chrono::Duration::minutes(1)));
    assert_eq!(char(&mut app, '{'), vec![Task::Repoll]);
    assert_eq!(app.at(), Some(t0 - chrono::Duration::minutes(9)));
    assert_eq!(char(&mut app, '['), vec![Task::Repoll]);
    assert_eq!(app.at(), Some(t0 - chrono::Duration::minutes(10)));
    assert!(
        status(&app).contains("2026-11-30T12:50:00Z"),
        "{}",
        status(&app)
    );

    // Stepping past now stops at now and says why.
    let mut app = app_at(&["a"], Utc::now() - chrono::Duration::seconds(30));
    assert_eq!(char(&mut app, '}'), vec![Task::Repoll]);
    assert!(app.at().unwrap() <= Utc::now());
    assert!(status(&app).contains("that is now"), "{}", status(&app));
}

#[test]
fn a_responder_types_the_instant() {
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 13, 0, 0).unwrap();
    let mut app = app_at(&["a"], t0);
    assert!(char(&mut app, 't').is_empty());
    // An empty line: typing does not append to the instant shown.
    assert_eq!(app.prompt(), Some(&Prompt::Instant(String::new())));
    // Keys go to the prompt, not to actions: this 'r' is no reconcile dialog.
    app.update(Message::Key(KeyEvent::new(
        KeyCode::Char('u'),
        KeyModifiers::CONTROL,
    )));
    type_text(&mut app, "yesterday-ish");
    assert!(key(&mut app, KeyCode::Enter).is_empty());
    assert!(status(&app).contains("invalid time"), "{}", status(&app));
    // Said at once, while the prompt is still open to mend it.
    assert!(matches!(app.prompt(), Some(Prompt::Instant(_))));
    assert!(app.dialog().is_none());
    assert_eq!(app.at(), Some(t0), "a bad instant changes nothing");

    for _ in 0.."yesterday-ish".len() {
        key(&mut app, KeyCode::Backspace);
    }
    type_text(&mut app, "2026-11-29T08:30:00Z");
    assert_eq!(key(&mut app, KeyCode::Enter), vec![Task::Repoll]);
    assert_eq!(app.prompt(), None);
    assert_eq!(
        app.at(),
        Some(Utc.with_ymd_and_hms(2026, 11, 29, 8, 30, 0).unwrap())
    );
}

#[test]
fn resolving_as_failed_offers_retryable() {
    let resolve_failed = |retry: bool| {
        let mut app = app_with(&["a"]);
        char(&mut app, 'f');
        type_text(&mut app, "provider says it never arrived");
        key(&mut app, KeyCode::Tab);
        assert_eq!(app.dialog().unwrap().focus, DialogField::Retryable);
        if retry {
            char(&mut app, ' ');
        }
        // A resolution of an effect with an amount moves money: the end of
        // the key is typed too.
        key(&mut app, KeyCode::Tab);
        assert_eq!(app.dialog().unwrap().focus, DialogField::KeySuffix);
        type_text(&mut app, "a");
        // Enter on the last field submits the valid form.
        settles(&key(&mut app, KeyCode::Enter))
            .into_iter()
            .cloned()
            .collect::<Vec<_>>()
    };
    for retry in [false, true] {
        assert_eq!(
            resolve_failed(retry),
            [Request::on_effect(
                &verbs::RESOLVE,
                "a",
                Some(1),
                Answers {
                    outcome: Some(Outcome::Failed),
                    retryable: retry,
                    ..Answers::because("provider says it never arrived")
                }
            )]
        );
    }
}

#[test]
fn an_action_the_ledger_says_cannot_apply_is_refused_before_anything_is_asked() {
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    let mut refused = snapshot(rows(&["pay:inv-0001", "pay:inv-0042"]), 2, 0);
    refused.applicability.insert(
        "pay:inv-0001".to_string(),
        Applicability {
            refused: [(
                "compensate".to_string(),
                "only a succeeded effect is compensated".to_string(),
            )]
            .into(),
            ..Applicability::default()
        },
    );
    app.update(Message::Snapshot(Box::new(refused)));

    assert!(char(&mut app, 'c').is_empty());
    assert!(
        app.dialog().is_none(),
        "a dialog opened for a refused action"
    );
    assert_eq!(
        status(&app),
        "cannot compensate: only a succeeded effect is compensated"
    );
    // What the ledger does not refuse still asks, and the next row is its own.
    assert!(char(&mut app, 'o').is_empty());
    assert!(app.dialog().is_some());
    key(&mut app, KeyCode::Esc);
    char(&mut app, 'j');
    char(&mut app, 'c');
    assert!(app.dialog().is_some(), "pay:inv-0042 may be compensated");
}

#[test]
fn the_compensate_dialog_names_the_approval_limit_either_way() {
    let note = |waits: bool, limit: Option<i64>| {
        let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
        let mut read = snapshot(rows(&["pay:inv-0001"]), 1, 0);
        read.applicability.insert(
            "pay:inv-0001".to_string(),
            Applicability {
                approval_limit_minor: limit,
                currency: Some("EUR".into()),
                compensation_waits_for_approval: waits,
                ..Applicability::default()
            },
        );
        app.update(Message::Snapshot(Box::new(read)));
        char(&mut app, 'c');
        app.dialog().unwrap().note.clone().unwrap()
    };
    let (above, role) = note(true, Some(50_000));
    assert!(
        above.starts_with("above the approval limit of 500.00 EUR: a second operator must approve"),
        "{above}"
    );
    assert_eq!(role, Role::Warn);
    let (within, _) = note(false, Some(50_000));
    assert!(
        within.starts_with("within the approval limit of 500.00 EUR"),
        "{within}"
    );
    let (none, _) = note(false, None);
    assert!(none.starts_with("no approval limit"), "{none}");
}

#[test]
fn any_key_opens_from_the_colon_prompt_and_links_are_followed_and_come_back() {
    let mut app = app_with(&["pay:inv-0001"]);
    char(&mut app, ':');
    type_text(&mut app, "refund:from-a-ticket:v1");
    assert_eq!(
        key(&mut app, KeyCode::Enter),
        vec![Task::LoadDetail("refund:from-a-ticket:v1".to_string())]
    );
    let mut history = fixtures::history();
    history.effect.op_key = "refund:from-a-ticket:v1".into();
    history.links = ["compensated by", "holds"]
        .iter()
        .map(|relation| effectwatch::ledger::history::Link {
            relation: relation.to_string(),
            op_key: format!("{relation}:key"),
            state: "pending".into(),
        })
        .collect();
    app.update(Message::Detail(
        "refund:from-a-ticket:v1".to_string(),
        Ok(Box::new(history)),
    ));
    // The second link, then Enter opens it; Esc comes back, then leaves.
    char(&mut app, 'n');
    assert_eq!(app.detail().unwrap().link, 1);
    assert_eq!(
        key(&mut app, KeyCode::Enter),
        vec![Task::LoadDetail("holds:key".to_string())]
    );
    assert_eq!(app.detail().unwrap().trail, ["refund:from-a-ticket:v1"]);
    assert_eq!(
        key(&mut app, KeyCode::Esc),
        vec![Task::LoadDetail("refund:from-a-ticket:v1".to_string())]
    );
    assert!(app.detail().unwrap().trail.is_empty());
    key(&mut app, KeyCode::Esc);
    assert!(app.detail().is_none());
    assert_eq!(selected_key(&app), "pay:inv-0001");

    // Esc in the prompt keeps what was shown.
    char(&mut app, ':');
    type_text(&mut app, "abandoned");
    assert!(key(&mut app, KeyCode::Esc).is_empty());
    assert!(app.detail().is_none());
}

#[test]
fn the_theme_key_cycles_the_built_in_themes_and_names_the_one_chosen() {
    let mut app = app_with(&["pay:inv-0001"]);
    let mut chosen = Vec::new();
    for _ in 0..5 {
        match char(&mut app, 'T').as_slice() {
            [Task::SwitchTheme(name)] => chosen.push(*name),
            other => panic!("T asked for {other:?}"),
        }
    }
    assert_eq!(
        chosen,
        ["light", "high-contrast", "colour-blind", "dark", "light"]
    );
    assert!(status(&app).starts_with("theme: light"), "{}", status(&app));
    // A theme from a file goes back to the first built-in one.
    let mut app = app_with_settings(
        &["pay:inv-0001"],
        Settings {
            theme: "/etc/effectwatch/ops.toml".into(),
            ..Settings::new("ops", false, Duration::from_secs(2))
        },
    );
    assert!(matches!(
        char(&mut app, 'T').as_slice(),
        [Task::SwitchTheme("dark")]
    ));
}

#[test]
fn a_filter_means_the_same_in_every_view_and_esc_clears_it_everywhere_at_once() {
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(fixtures::snapshot(3))));
    char(&mut app, '6');
    let shown = |app: &App| app.model_of(View::Audit).rows.len();
    assert_eq!(shown(&app), 4);

    // target: finds the actions on effects of that target, whatever the key says.
    char(&mut app, '/');
    type_text(&mut app, "target:INV-448");
    key(&mut app, KeyCode::Enter);
    assert_eq!(shown(&app), 2);
    // A field the view has, given to a field it does not: nothing matches.
    key(&mut app, KeyCode::Esc);
    char(&mut app, '/');
    type_text(&mut app, "operator:bob");
    key(&mut app, KeyCode::Enter);
    assert_eq!(shown(&app), 2);
    char(&mut app, '7');
    assert!(
        app.model_of(View::Finance).rows.is_empty(),
        "finance has no operator"
    );

    // Esc clears it in the small views too, before any poll comes back.
    char(&mut app, '6');
    key(&mut app, KeyCode::Esc);
    assert_eq!(shown(&app), 4);
    char(&mut app, '7');
    assert!(!app.model_of(View::Finance).rows.is_empty());

    // action: filters finance by the action.
    char(&mut app, '/');
    type_text(&mut app, "action:nothing-like-it");
    key(&mut app, KeyCode::Enter);
    assert!(app.model_of(View::Finance).rows.is_empty());
}

#[test]
fn the_arrows_move_to_a_button_and_stay_there() {
    let mut app = app_with(&["pay:inv-0001"]);
    char(&mut app, 'a');
    type_text(&mut app, "called the customer");
    key(&mut app, KeyCode::Tab);
    // Back is on the left, Confirm on the right: each arrow goes to its side.
    key(&mut app, KeyCode::Right);
    key(&mut app, KeyCode::Right);
    assert!(
        app.dialog().unwrap().confirm_selected,
        "Right twice is still Confirm"
    );
    key(&mut app, KeyCode::Left);
    key(&mut app, KeyCode::Left);
    assert!(
        !app.dialog().unwrap().confirm_selected,
        "Left twice is still Back"
    );
    // Up and Down move between the fields; the typed reason is kept.
    key(&mut app, KeyCode::Up);
    assert_eq!(app.dialog().unwrap().focus, DialogField::Reason);
    assert_eq!(app.dialog().unwrap().reason, "called the customer");
}

/// A standby the console reads is promoted (a failover): the console says
/// it reads the primary now; a primary demoted says it is a standby.
#[test]
fn a_console_says_when_the_server_it_reads_is_promoted_or_demoted() {
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    let read = |lag: Option<f64>| Snapshot {
        server: Some("n1:5432/ledger".to_string()),
        replica_lag: lag,
        ..snapshot(rows(&["a"]), 1, 0)
    };
    app.update(Message::Snapshot(Box::new(read(Some(0.2)))));
    app.update(Message::Snapshot(Box::new(read(Some(1.4)))));
    assert!(app.status().is_none(), "{:?}", app.status());
    app.update(Message::Snapshot(Box::new(read(None))));
    let promoted = app.status().cloned().expect("the promotion is said");
    assert_eq!(
        promoted.text,
        "n1:5432/ledger was promoted: this console reads the primary now"
    );
    assert_eq!(promoted.role, Role::Warn);
    app.update(Message::Snapshot(Box::new(read(Some(0.0)))));
    assert_eq!(
        status(&app),
        "n1:5432/ledger is a standby now: changes show at each poll"
    );
}

#[test]
fn a_console_whose_ledger_moved_to_another_server_says_where_it_reads_now() {
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    let read_from = |server: &str| Snapshot {
        server: Some(server.to_string()),
        ..snapshot(rows(&["a"]), 1, 0)
    };
    app.update(Message::Snapshot(Box::new(read_from("db1:5432/ledger"))));
    app.update(Message::Snapshot(Box::new(read_from("db1:5432/ledger"))));
    assert!(app.status().is_none(), "{:?}", app.status());
    app.update(Message::Snapshot(Box::new(read_from("db2:5433/ledger"))));
    let status = app.status().cloned().expect("the move is said");
    assert_eq!(
        status.text,
        "the ledger moved: reading db2:5433/ledger now (was db1:5432/ledger)"
    );
    assert_eq!(status.role, Role::Warn);
}

/// A pane first visited after rows arrived above its first one starts at
/// the top (it started mid-list, and `g` then `d` acted on row 3); once
/// visited, the selection follows its item as rows come and go.
#[test]
fn a_first_visit_starts_at_the_top_and_the_selection_follows_its_item_after() {
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    key(&mut app, KeyCode::Char('2'));
    app.update(Message::Snapshot(Box::new(snapshot(
        rows(&["c", "d", "e"]),
        3,
        0,
    ))));
    app.update(Message::Snapshot(Box::new(snapshot(
        rows(&["a", "b", "c", "d", "e"]),
        5,
        0,
    ))));
    key(&mut app, KeyCode::Char('1'));
    assert_eq!(app.current_view(), OVERDUE);
    assert_eq!(app.list(OVERDUE).selected, 0);
    assert_eq!(app.selected_row().unwrap().id, "a");

    app.update(Message::Snapshot(Box::new(snapshot(
        rows(&["z", "a", "b", "c", "d", "e"]),
        6,
        0,
    ))));
    assert_eq!(
        app.selected_row().unwrap().id,
        "a",
        "it follows its item now"
    );
    assert_eq!(app.list(OVERDUE).selected, 1);
}

/// One rule for what a confirmation asks: moving money asks for the end of
/// the key; nothing else does. A refund resolved failed asks; a message
/// with no amount resolved succeeded does not.
#[test]
fn only_what_moves_money_asks_for_the_end_of_the_key() {
    let mut money = row("refund:jpy-10560", 1);
    money.amount_minor = Some(10_560);
    money.currency = Some("JPY".to_string());
    let mut message = row("notify:msg-7", 2);
    message.amount_minor = None;
    message.currency = None;
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(snapshot(
        vec![money, message],
        2,
        0,
    ))));

    char(&mut app, 'f');
    let dialog = app.dialog().expect("resolve failed opens a dialog");
    assert_eq!(dialog.required_suffix.as_deref(), Some("py-10560"));
    key(&mut app, KeyCode::Esc);

    char(&mut app, 'j');
    char(&mut app, 'o');
    let dialog = app.dialog().expect("resolve succeeded opens a dialog");
    assert_eq!(dialog.required_suffix, None, "a message moves no money");
    key(&mut app, KeyCode::Esc);

    char(&mut app, 'e');
    assert_eq!(
        app.dialog().unwrap().required_suffix,
        None,
        "escalating moves no money"
    );
}

/// Resolving as succeeded an effect never dispatched says, before anything
/// is written, that the ledger has no record of a provider call.
#[test]
fn resolving_a_prepared_effect_as_succeeded_says_it_was_never_dispatched() {
    let mut prepared = row("refund:prep-1", 1);
    prepared.dispatched = false;
    let sent = row("refund:sent-2", 2);
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(snapshot(
        vec![prepared, sent],
        2,
        0,
    ))));
    char(&mut app, 'o');
    let note = app.dialog().unwrap().note.clone().expect("a note");
    assert!(note.0.contains("never dispatched"), "{}", note.0);
    assert_eq!(note.1, Role::Warn);
    key(&mut app, KeyCode::Esc);
    char(&mut app, 'j');
    char(&mut app, 'o');
    assert_eq!(app.dialog().unwrap().note, None);
}

/// Every result and refusal of the session is kept whole in a log that `M`
/// opens; a message about another item fades once the selection moves.
#[test]
fn results_are_kept_in_a_log_and_a_message_about_another_item_fades() {
    let mut app = app_with(&["a", "b"]);
    let long = format!(
        "compensate:refund:INV-177:{}:1 of 399.60 EUR sent",
        "x".repeat(120)
    );
    let compensate = || {
        Request::on_effect(
            &verbs::COMPENSATE,
            "a",
            Some(1),
            Answers::because("paid twice"),
        )
    };
    app.update(done(compensate(), &long, json!({})));
    app.update(failed(compensate(), "cannot compensate a: not succeeded"));
    assert_eq!(app.messages().len(), 2);
    assert_eq!(app.messages()[0].text, format!("✓ {long}"), "kept whole");
    assert_eq!(app.messages()[1].about.as_deref(), Some("a"));
    assert_eq!(app.status_now().unwrap().role, Role::Critical);

    char(&mut app, 'j');
    assert_eq!(
        app.status_now().unwrap().role,
        Role::Muted,
        "about a, while b is selected"
    );
    char(&mut app, 'k');
    assert_eq!(app.status_now().unwrap().role, Role::Critical);

    char(&mut app, 'M');
    assert_eq!(app.overlay(), Some(Overlay::Messages));
}

/// `C` in the duplicates pane acknowledges every item of the (filtered)
/// pane: the dialog first says how many and how they split, asks one
/// reason, and sends one request with every item and the version seen.
#[test]
fn clear_all_acknowledges_every_item_of_the_duplicates_pane() {
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(fixtures::snapshot(3))));
    char(&mut app, '3');
    assert!(char(&mut app, 'C').is_empty());
    let dialog = app.dialog().expect("a dialog first");
    assert!(
        dialog.summary.contains("acknowledge-duplicates 6 items of")
            && dialog.summary.contains("with a mismatch")
            && dialog.summary.contains("replays only"),
        "{}",
        dialog.summary
    );
    type_text(&mut app, "replays of a known retry storm");
    let commands = key(&mut app, KeyCode::Enter);
    let requests = settles(&commands);
    match requests.as_slice() {
        [
            Request {
                verb,
                subject: Subject::Pane { targets },
                answers,
            },
        ] => {
            assert_eq!(verb.name, "acknowledge-duplicates");
            assert_eq!(targets.len(), 6);
            assert_eq!(answers.reason, "replays of a known retry storm");
        }
        other => panic!("{other:?}"),
    }
}

/// `v` in the duplicates pane lists the keys only replayed too, through
/// the filter (so the filter line says so and `list --filter` asks the
/// same), and hides them again; elsewhere it says where it works.
#[test]
fn v_lists_the_replays_too_and_hides_them_again() {
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(fixtures::snapshot(3))));
    assert!(char(&mut app, 'v').is_empty(), "not in the overdue pane");
    assert_eq!(app.filter_text(), "");
    assert!(app.status_now().unwrap().text.contains("duplicates pane"));

    char(&mut app, '3');
    let tasks = char(&mut app, 'v');
    assert!(tasks.iter().any(|task| matches!(task, Task::Repoll)));
    assert_eq!(app.filter_text(), "with-replays");
    assert_eq!(app.filter().scopes, [FilterScope::WithReplays]);

    // A text filter stays as it was.
    char(&mut app, '/');
    for _ in 0.."with-replays".len() {
        key(&mut app, KeyCode::Backspace);
    }
    type_text(&mut app, "INV-402 replays-only");
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.filter().scopes, [FilterScope::ReplaysOnly]);
    char(&mut app, 'v');
    assert_eq!(app.filter_text(), "INV-402");
    char(&mut app, 'v');
    assert_eq!(app.filter_text(), "INV-402 with-replays");
}

/// `E` escalates every item of the (filtered) pane: the dialog says how
/// many, asks one reason, and sends one request naming each item and the
/// version seen.
#[test]
fn escalate_all_sends_every_item_of_the_pane_to_a_person() {
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(fixtures::snapshot(3))));
    assert!(char(&mut app, 'E').is_empty());
    let dialog = app.dialog().expect("a dialog first");
    assert!(
        dialog
            .summary
            .starts_with("Escalate 3 items of Overdue pending"),
        "{}",
        dialog.summary
    );
    assert!(
        key(&mut app, KeyCode::Enter).is_empty(),
        "a reason is required"
    );
    type_text(&mut app, "provider outage, finance decides");
    let commands = key(&mut app, KeyCode::Enter);
    match settles(&commands).as_slice() {
        [
            Request {
                verb,
                subject: Subject::Pane { targets },
                answers,
            },
        ] => {
            assert_eq!(**verb, verbs::ESCALATE);
            assert_eq!(targets.len(), 3);
            assert!(targets.iter().all(|(_, seen)| *seen > 0));
            assert_eq!(answers.sink, None);
            assert_eq!(answers.reason, "provider outage, finance decides");
        }
        other => panic!("{other:?}"),
    }
}

/// Reverse-duplicate, once reachable only from the command line, is a row
/// of the action table: `u` asks for the extra record's reference, a
/// reason and the key's end (it moves money), and sends the same request
/// the command line does.
#[test]
fn a_duplicate_record_is_reversed_from_the_console() {
    let mut app = app_with(&["refund:INV-9:v1"]);
    assert!(char(&mut app, 'u').is_empty());
    let dialog = app.dialog().expect("a dialog first");
    assert_eq!(dialog.focus, DialogField::ExternalRef);
    type_text(&mut app, "re_2");
    key(&mut app, KeyCode::Tab);
    type_text(&mut app, "paid twice, the bank shows both");
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.dialog().unwrap().focus, DialogField::KeySuffix);
    type_text(&mut app, "INV-9");
    let sent: Vec<Request> = settles(&key(&mut app, KeyCode::Enter))
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(
        sent,
        [Request::on_effect(
            &verbs::REVERSE_DUPLICATE,
            "refund:INV-9:v1",
            Some(1),
            Answers {
                reference: "re_2".to_string(),
                ..Answers::because("paid twice, the bank shows both")
            }
        )]
    );
}

/// A verb added as one row of the table is a console key with its dialog:
/// `U` reopens the acknowledged repeats of the selection, with a reason and
/// no key to type (it moves no money).
#[test]
fn acknowledged_repeats_are_reopened_from_the_console() {
    let mut app = app_with(&["refund:INV-9:v1"]);
    assert!(char(&mut app, 'U').is_empty());
    let dialog = app.dialog().expect("a dialog first");
    assert_eq!(dialog.focus, DialogField::Reason);
    assert_eq!(dialog.required_suffix, None);
    type_text(&mut app, "acknowledged by mistake");
    let sent: Vec<Request> = settles(&key(&mut app, KeyCode::Enter))
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(
        sent,
        [Request::on_effect(
            &verbs::REOPEN_DUPLICATES,
            "refund:INV-9:v1",
            Some(1),
            Answers::because("acknowledged by mistake")
        )]
    );
}

// ---------------------------------------------------------------------------
// Acting on the rows the operator means (#46).

const FIRST_ESCALATION: &str = "escalate:refund:INV-448:AP-77:v1:duplicate";
const SECOND_ESCALATION: &str = "escalate:refund:INV-433:AP-40:v2:unknown";

fn fixture_app(operator: &str) -> App {
    let mut app = App::new(Settings::new(operator, false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(fixtures::snapshot(3))));
    app
}

/// The fixtures read again: by a poll that began before the console's
/// actions so far (`settled_actions` 0), or after them.
fn fixtures_read_after(settled_actions: u64) -> Message {
    Message::Snapshot(Box::new(Snapshot {
        settled_actions,
        ..fixtures::snapshot(3)
    }))
}

/// Types the reason, confirms, and returns the one request sent.
fn confirm_with_reason(app: &mut App, reason: &str) -> Request {
    type_text(app, reason);
    let sent = key(app, KeyCode::Enter);
    match settles(&sent).as_slice() {
        [request] => (*request).clone(),
        other => panic!("{other:?}: {}", status(app)),
    }
}

fn dialog_subject(app: &App) -> Option<Subject> {
    app.dialog().map(|dialog| dialog.subject.clone())
}

/// Z then Z on Escalations asked for a reason again and answered "✓ …
/// already resolved": the resolved escalation now leaves the view at once,
/// the selection moves on, and a read begun before the action does not
/// bring it back.
#[test]
fn a_resolved_escalation_leaves_the_view_and_z_again_is_for_the_next_one() {
    let mut app = fixture_app("ops");
    char(&mut app, '5');
    assert_eq!(selected(&app).1.as_deref(), Some(FIRST_ESCALATION));
    char(&mut app, 'Z');
    let request = confirm_with_reason(&mut app, "compensated by hand");
    app.update(done(
        request,
        &format!("resolved escalation {FIRST_ESCALATION} of refund:INV-448:AP-77:v1"),
        json!({ "status": "changed", "state": "resolved" }),
    ));
    assert_eq!(app.model().position(FIRST_ESCALATION), None, "gone at once");
    assert_eq!(selected(&app).1.as_deref(), Some(SECOND_ESCALATION));

    app.update(fixtures_read_after(0));
    assert_eq!(
        app.model().position(FIRST_ESCALATION),
        None,
        "a read begun before the action shows it as the result said"
    );
    char(&mut app, 'Z');
    assert_eq!(
        dialog_subject(&app),
        Some(Subject::Escalation {
            escalation_key: SECOND_ESCALATION.to_string()
        })
    );
}

/// Nothing written is a refusal: "already resolved" is never shown with ✓.
#[test]
fn an_escalation_already_resolved_is_a_refusal_not_a_success() {
    let mut app = fixture_app("ops");
    char(&mut app, '5');
    let request = Request::on_escalation(
        &verbs::RESOLVE_ESCALATION,
        FIRST_ESCALATION,
        Answers::because("done"),
    );
    app.update(done(
        request,
        &format!("escalation {FIRST_ESCALATION} is already resolved"),
        json!({ "status": "unchanged", "state": "resolved" }),
    ));
    let said = status(&app);
    assert!(!said.contains('✓'), "{said}");
    assert!(said.starts_with("cannot resolve escalation: "), "{said}");
    assert_eq!(app.status().unwrap().role, Role::Warn);
    assert_eq!(
        app.messages().back().unwrap().about.as_deref(),
        Some(FIRST_ESCALATION)
    );
}

/// An escalation acknowledged shows it at once, and a second
/// acknowledgement is refused before any dialog; resolving it still asks.
#[test]
fn an_acknowledged_escalation_refuses_a_second_acknowledgement_before_the_dialog() {
    let mut app = fixture_app("ops");
    char(&mut app, '5');
    char(&mut app, 'K');
    let request = confirm_with_reason(&mut app, "on it");
    app.update(done(
        request,
        "acknowledged",
        json!({ "status": "changed", "state": "acknowledged" }),
    ));
    let state = app.selected_row().unwrap().cells[3].text.clone();
    assert_eq!(state, "✓ acknowledged");
    assert!(char(&mut app, 'K').is_empty());
    assert!(app.dialog().is_none(), "a dialog opened");
    assert_eq!(
        status(&app),
        "cannot acknowledge: the escalation is acknowledged already"
    );
    char(&mut app, 'Z');
    assert!(app.dialog().is_some(), "{}", status(&app));
}

/// `l` then `x` on Held answered "changed since you looked": the released
/// effect now leaves the pane at once and `x` is for the next row.
#[test]
fn a_released_hold_leaves_the_pane_and_x_acts_on_the_next_row() {
    let mut app = fixture_app("ops");
    char(&mut app, '4');
    let (first, second) = ("refund:INV-402:AP-92:v1", "refund:INV-466:AP-18:v1");
    assert_eq!(selected_key(&app), first);
    char(&mut app, 'l');
    let request = confirm_with_reason(&mut app, "holder settled by hand");
    app.update(done(
        request,
        &format!("released {first}: now pending (version 2, audit #41)"),
        json!({ "state": "pending", "version": 2 }),
    ));
    assert_eq!(app.model().position(first), None, "gone at once");
    assert_eq!(selected_key(&app), second);

    app.update(fixtures_read_after(0));
    assert_eq!(
        app.model().position(first),
        None,
        "not back from an older read"
    );
    char(&mut app, 'x');
    assert_eq!(
        dialog_subject(&app),
        Some(Subject::Effect {
            op_key: second.to_string(),
            seen: Some(1)
        })
    );
    key(&mut app, KeyCode::Esc);

    // A read that knows of the release is the ledger's word again.
    app.update(fixtures_read_after(1));
    assert!(app.model().position(first).is_some());
}

/// A row the action leaves in its pane shows its new version at once, and
/// until a read says what applies to it now, what the ledger's rules were
/// read for its old state is refused before any dialog.
#[test]
fn a_row_that_stays_shows_its_new_version_and_waits_for_the_next_read() {
    let mut app = app_with(&["a", "b"]);
    char(&mut app, 'a');
    let request = confirm_with_reason(&mut app, "called the bank");
    app.update(done(
        request,
        "annotated a: now pending (version 7, audit #3)",
        json!({ "state": "pending", "version": 7 }),
    ));
    assert_eq!(selected_key(&app), "a");
    assert_eq!(app.selected_row().unwrap().version, Some(7));
    assert!(char(&mut app, 'd').is_empty());
    assert!(app.dialog().is_none(), "a dialog opened");
    assert!(
        status(&app).starts_with("cannot acknowledge: a changed with your annotate just now"),
        "{}",
        status(&app)
    );

    // An older read keeps the version the result gave; a newer one decides.
    feed(&mut app, &["a", "b"]);
    assert_eq!(app.selected_row().unwrap().version, Some(7));
    let read = Snapshot {
        settled_actions: 1,
        ..snapshot(vec![row("a", 7), row("b", 2)], 2, 0)
    };
    app.update(Message::Snapshot(Box::new(read)));
    char(&mut app, 'd');
    assert_eq!(
        dialog_subject(&app),
        Some(Subject::Effect {
            op_key: "a".to_string(),
            seen: Some(7)
        })
    );
}

/// The ledger refuses an operator's approval of a compensation they asked
/// for; the console says so at once, not after the reason and the key's end.
#[test]
fn approving_ones_own_compensation_is_refused_before_the_dialog() {
    for (operator, refused) in [("alice", true), (" Alice ", true), ("bob", false)] {
        let mut app = fixture_app(operator);
        char(&mut app, '5');
        key(&mut app, KeyCode::End);
        assert!(selected(&app).1.unwrap().starts_with("approval:"));
        assert!(char(&mut app, 'A').is_empty());
        assert_eq!(app.dialog().is_none(), refused, "{operator}");
        if refused {
            assert_eq!(
                status(&app),
                "cannot approve: alice requested this compensation: a second, different \
                 operator must approve it"
            );
        }
    }
}

/// Every entry of the log is headed by the key(s) the action was done to,
/// not by what was selected when its result arrived.
#[test]
fn the_message_log_heads_a_result_with_the_key_acted_on() {
    let mut app = app_with(&["refund:INV-580", "refund:INV-825", "c", "d", "e"]);
    char(&mut app, 'r');
    key(&mut app, KeyCode::Right);
    let sent = key(&mut app, KeyCode::Enter);
    let request = settles(&sent)[0].clone();
    char(&mut app, 'j');
    assert_eq!(selected_key(&app), "refund:INV-825");
    app.update(failed(
        request,
        "effect refund:INV-580 changed since you looked",
    ));
    let logged = app.messages().back().unwrap();
    assert_eq!(logged.about.as_deref(), Some("refund:INV-580"));

    // Many keys: the first three and how many more.
    let targets: Vec<(String, i64)> = ["refund:INV-580", "refund:INV-825", "c", "d", "e"]
        .iter()
        .map(|key| (key.to_string(), 1))
        .collect();
    app.update(done(
        Request {
            verb: &verbs::RECONCILE,
            subject: Subject::Pane { targets },
            answers: Answers::default(),
        },
        "reconciled 5 of 5: absent 5",
        json!({}),
    ));
    assert_eq!(
        app.messages().back().unwrap().about.as_deref(),
        Some("refund:INV-580, refund:INV-825, c and 2 more")
    );
}

/// A bulk key pressed after a new filter, before that filter's rows were
/// read, is refused: the rows on screen are the previous filter's. Once
/// read, its dialog counts and names the rows it will touch.
#[test]
fn a_bulk_key_waits_for_the_rows_of_the_filter_it_would_act_on() {
    let mut app = app_with(&["a", "b", "c", "d", "e"]);
    char(&mut app, '/');
    type_text(&mut app, "target:acct:b");
    key(&mut app, KeyCode::Enter);
    assert!(!app.pane_rows_match_filter());
    assert!(char(&mut app, 'R').is_empty());
    assert!(app.dialog().is_none(), "a dialog on the previous rows");
    assert_eq!(
        status(&app),
        "cannot reconcile all: the overdue pending matching \"target:acct:b\" are still being \
         read; R again once they show"
    );

    let read = Snapshot {
        filter: app.filter().clone(),
        ..snapshot(vec![row("b", 2)], 1, 0)
    };
    app.update(Message::Snapshot(Box::new(read)));
    char(&mut app, 'R');
    let dialog = app.dialog().expect("a dialog on the filter's rows");
    assert!(dialog.summary.contains("1 item of"), "{}", dialog.summary);
    assert_eq!(dialog.names.as_deref(), Some("b"));
    key(&mut app, KeyCode::Esc);

    // Unfiltered again: five rows, three named.
    key(&mut app, KeyCode::Esc);
    feed(&mut app, &["a", "b", "c", "d", "e"]);
    char(&mut app, 'R');
    assert_eq!(
        app.dialog().unwrap().names.as_deref(),
        Some("a, b, c and 2 more")
    );
}

/// The demo's welcome names its keys once: its words are the first
/// message, the keys it names the hint beside it — never both in each.
#[test]
fn the_welcome_says_its_hint_once() {
    let hint = "i: how a second operator joins · ?: every key";
    let app = app_with_settings(
        &["a"],
        Settings {
            welcome: Some(format!("demo: agents are at work · {hint}")),
            ..Settings::new("ops", false, Duration::from_secs(2))
        },
    );
    assert_eq!(status(&app), "demo: agents are at work");
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(160, 24)).unwrap();
    terminal
        .draw(|frame| {
            effectwatch::console::views::draw(
                frame,
                &app,
                &effectwatch::console::theme::Theme::default(),
            )
        })
        .unwrap();
    let buffer = terminal.backend().buffer();
    let screen: String = (0..buffer.area.height)
        .map(|y| {
            (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
                + "\n"
        })
        .collect();
    assert_eq!(
        screen.matches("i: how a second operator joins").count(),
        1,
        "{screen}"
    );
    assert_eq!(
        screen.matches("demo: agents are at work").count(),
        1,
        "{screen}"
    );
}

/// The screen as drawn from the app, one line per row.
fn drawn(app: &App) -> String {
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(160, 40)).unwrap();
    terminal
        .draw(|frame| {
            effectwatch::console::views::draw(
                frame,
                app,
                &effectwatch::console::theme::Theme::default(),
            )
        })
        .unwrap();
    let buffer = terminal.backend().buffer();
    (0..buffer.area.height)
        .map(|y| {
            (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
                + "\n"
        })
        .collect()
}

fn ctrl(app: &mut App, ch: char) -> Vec<Task> {
    app.update(Message::Key(KeyEvent::new(
        KeyCode::Char(ch),
        KeyModifiers::CONTROL,
    )))
}

/// Every escalation of the (filtered) escalations view is acknowledged
/// with one key (C-k) and resolved with another (C-w): the dialog counts
/// them by state, the compensation awaiting approval is not one of them,
/// and what the ledger answered shows at once.
#[test]
fn every_escalation_of_the_view_is_acknowledged_or_resolved_with_one_key() {
    let mut app = app_with(&["a"]);
    let escalations = fixtures::escalation_rows();
    let keys: Vec<String> = escalations
        .iter()
        .map(|row| row.escalation_key.clone())
        .collect();
    app.update(Message::Snapshot(Box::new(Snapshot {
        escalations,
        approvals: fixtures::approval_rows(),
        ..snapshot(rows(&["a"]), 1, 0)
    })));
    // Elsewhere the key says where it works.
    assert!(ctrl(&mut app, 'k').is_empty());
    assert!(app.dialog().is_none());

    char(&mut app, '5');
    assert!(ctrl(&mut app, 'k').is_empty());
    let dialog = app.dialog().expect("a dialog for every escalation");
    assert_eq!(
        dialog.subject,
        Subject::Escalations {
            escalation_keys: keys.clone()
        }
    );
    assert!(
        dialog
            .summary
            .contains("3 escalations: 1 delivered, 1 failed, 1 open"),
        "{}",
        dialog.summary
    );
    type_text(&mut app, "on it");
    let tasks = key(&mut app, KeyCode::Enter);
    let request = Request {
        verb: &verbs::ACKNOWLEDGE_ESCALATION,
        subject: Subject::Escalations {
            escalation_keys: keys.clone(),
        },
        answers: Answers::because("on it"),
    };
    assert_eq!(settles(&tasks), [&request]);
    let states: Vec<serde_json::Value> = keys
        .iter()
        .map(|key| json!([key, "acknowledged"]))
        .collect();
    app.update(done(
        request,
        "acknowledge: 3 of 3 escalations done",
        json!({ "action": "acknowledge", "done": 3, "skipped": 0, "failed": 0, "states": states }),
    ));
    let state = app
        .model()
        .columns
        .iter()
        .position(|column| column.title == "state")
        .unwrap();
    let shown: Vec<&str> = app
        .model()
        .rows
        .iter()
        .filter(|row| keys.contains(&row.id))
        .map(|row| row.cells[state].text.as_str())
        .collect();
    assert_eq!(shown, ["✓ acknowledged"; 3]);

    assert!(ctrl(&mut app, 'w').is_empty());
    type_text(&mut app, "decided");
    let tasks = key(&mut app, KeyCode::Enter);
    let request = Request {
        verb: &verbs::RESOLVE_ESCALATION,
        subject: Subject::Escalations {
            escalation_keys: keys.clone(),
        },
        answers: Answers::because("decided"),
    };
    assert_eq!(settles(&tasks), [&request]);
    let states: Vec<serde_json::Value> = keys.iter().map(|key| json!([key, "resolved"])).collect();
    app.update(done(
        request,
        "resolve: 3 of 3 escalations done",
        json!({ "done": 3, "skipped": 0, "failed": 0, "states": states }),
    ));
    assert!(
        app.model().rows.iter().all(|row| !keys.contains(&row.id)),
        "resolved escalations leave the view"
    );
}

/// Held rows, the first `stopped` of them with agents that stopped asking.
fn held_snapshot(stopped: usize) -> Snapshot {
    let held: Vec<_> = fixtures::held_rows()
        .into_iter()
        .take(3)
        .enumerate()
        .map(|(index, row)| effectwatch::ledger::panes::HeldRow {
            still_asking: index >= stopped,
            ..row
        })
        .collect();
    Snapshot {
        panes: vec![(Pane::Held, PaneRows::Held(held))],
        counts: vec![(Pane::Held, 3)],
        ..snapshot(rows(&["a"]), 1, 0)
    }
}

/// Releasing held items whose agents stopped asking would send them to
/// Overdue undispatched: the release dialog says how many, and offers to
/// cancel those instead, releasing the rest.
#[test]
fn a_release_offers_cancel_for_held_items_whose_agents_stopped_asking() {
    let mut app = app_with(&["a"]);
    app.update(Message::Snapshot(Box::new(held_snapshot(2))));
    char(&mut app, '4');
    let keys: Vec<(String, i64)> = app
        .model()
        .rows
        .iter()
        .map(|row| (row.op_key.clone().unwrap(), row.version.unwrap()))
        .collect();
    let stopped: Vec<(String, i64)> = fixtures::held_rows()
        .into_iter()
        .take(2)
        .map(|row| (row.op_key, row.version))
        .collect();

    char(&mut app, 'L');
    let dialog = app.dialog().expect("the release dialog");
    assert_eq!(dialog.stopped_asking, stopped);
    let (note, role) = dialog.note.clone().expect("a note");
    assert_eq!(role, Role::Warn);
    assert!(
        note.contains(
            "2 of these: their agents have not asked for them within their pending window; \
             released, they go to Overdue undispatched"
        ),
        "{note}"
    );
    assert!(drawn(&app).contains("cancel instead (space)"));
    type_text(&mut app, "holders settled");
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.dialog().unwrap().focus, DialogField::CancelInstead);
    char(&mut app, ' ');
    assert!(app.dialog().unwrap().cancel_instead);
    let tasks = key(&mut app, KeyCode::Enter);
    let rest: Vec<(String, i64)> = keys
        .iter()
        .filter(|key| !stopped.contains(key))
        .cloned()
        .collect();
    assert_eq!(
        settles(&tasks),
        [
            &Request {
                verb: &verbs::CANCEL,
                subject: Subject::Pane {
                    targets: stopped.clone()
                },
                answers: Answers::because("holders settled")
            },
            &Request {
                verb: &verbs::RELEASE,
                subject: Subject::Pane { targets: rest },
                answers: Answers::because("holders settled")
            }
        ]
    );

    // One of them alone: the same note, and released as asked when the
    // offer is left alone.
    let mut app = app_with(&["a"]);
    app.update(Message::Snapshot(Box::new(held_snapshot(3))));
    char(&mut app, '4');
    let (op_key, seen) = keys[0].clone();
    while app.selected_row().and_then(|row| row.op_key.clone()) != Some(op_key.clone()) {
        key(&mut app, KeyCode::Down);
    }
    char(&mut app, 'l');
    let dialog = app.dialog().expect("the release dialog");
    assert!(
        dialog
            .note
            .as_ref()
            .is_some_and(|(note, _)| note
                .contains("its agent has not asked for it within its pending window")),
        "{:?}",
        dialog.note
    );
    type_text(&mut app, "holder settled");
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.dialog().unwrap().focus, DialogField::CancelInstead);
    let tasks = key(&mut app, KeyCode::Enter);
    assert_eq!(
        settles(&tasks),
        [&Request::on_effect(
            &verbs::RELEASE,
            op_key,
            Some(seen),
            Answers::because("holder settled")
        )]
    );
}

/// The detail of an unknown effect names the error class its worker gave,
/// when it gave no reason.
#[test]
fn the_detail_names_the_error_class_of_an_unknown_effect() {
    let mut history = fixtures::history();
    history.effect.failure_reason = None;
    history.effect.error_class = Some("timeout".to_string());
    let key_of = history.effect.op_key.clone();
    let mut app = app_with(&["a"]);
    app.update(Message::Snapshot(Box::new(fixtures::snapshot(1))));
    char(&mut app, '2');
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.detail().unwrap().op_key, key_of);
    app.update(Message::Detail(key_of, Ok(Box::new(history))));
    let screen = drawn(&app);
    let failure = screen
        .lines()
        .find(|line| line.contains("failure"))
        .unwrap_or_else(|| panic!("no failure line:\n{screen}"));
    assert!(failure.contains("timeout"), "{failure}");
}
