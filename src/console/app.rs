//! The console's state and its update function. Pure: it never touches the
//! database or the terminal; it returns [`Command`]s for the runtime to carry
//! out, and it is tested without either.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

pub use super::action::DialogField;
use super::action::{Action, Answers, Confirmation, Scope, Subject};
use super::model::{self, APPROVAL_ROW, TableModel};
use super::theme::Role;
pub use super::view::{VIEW_COUNT, VIEWS, View};
use crate::ledger::escalations::{ApprovalRow, EscalationRow};
use crate::ledger::finance::FinanceReview;
use crate::ledger::history::EffectHistory;
use crate::ledger::model::AuditEntry;
use crate::ledger::panes::{Filter, Pane, PaneRows};
use crate::settle::Request;

/// Rows fetched per pane and poll: memory and poll cost stay bounded however
/// many items are open; moving past the window fetches the next one.
pub const WINDOW: usize = 500;

/// One poll's worth of data; the UI renders from the latest one.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub panes: Vec<(Pane, PaneRows)>,
    /// Items per pane in the whole ledger (not only the fetched window).
    pub counts: Vec<(Pane, i64)>,
    pub escalations: Vec<EscalationRow>,
    pub approvals: Vec<ApprovalRow>,
    pub audit: Vec<AuditEntry>,
    /// Escalations plus approvals, and audit entries, in the whole ledger at
    /// the snapshot's instant; None under a filter (the tab counts what matches).
    pub escalation_count: Option<i64>,
    pub audit_count: Option<i64>,
    /// Whether the poller's LISTEN connection was up: if not, changes show
    /// only at the next regular poll.
    pub listening: bool,
    pub finance: Option<FinanceReview>,
    /// Why the finance review could not be read; the panes are still fresh.
    pub finance_error: Option<String>,
    pub polled_at: DateTime<Utc>,
    pub latency: Duration,
    pub database: String,
    pub role: String,
    /// The window offsets these rows were fetched at.
    pub offsets: [usize; 4],
}

#[derive(Debug, Clone, PartialEq)]
pub enum Connection {
    Connecting,
    Live,
    /// The last poll failed; data shown is from `since`.
    Stale {
        since: Instant,
        error: String,
    },
}

/// What the runtime should do after an update.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Quit,
    /// Poll settings (filter, interval, pause, window offsets) changed.
    Repoll,
    LoadDetail(String),
    /// A writing action the operator confirmed, as the settling request it became.
    Perform(Request),
    Copy(String),
}

/// Messages into the update function.
#[derive(Debug, Clone)]
pub enum Message {
    Key(KeyEvent),
    Snapshot(Box<Snapshot>),
    PollFailed(String),
    Detail(String, Result<Box<EffectHistory>, String>),
    Performed(Result<String, String>),
    Notice(String),
    Tick,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListState {
    pub selected: usize,
    /// The id the selection follows across refreshes.
    pub selected_id: Option<String>,
    pub sort: Option<(usize, bool)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Detail {
    pub op_key: String,
    pub history: Option<Box<EffectHistory>>,
    pub error: Option<String>,
    pub scroll: u16,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Dialog {
    pub action: Action,
    pub title: String,
    /// What will happen, in a sentence.
    pub summary: String,
    pub subject: Subject,
    pub reason: String,
    pub external_ref: String,
    pub key_suffix: String,
    /// For resolve as failed: the same key may be dispatched again.
    pub retryable: bool,
    /// What the operator must type to prove they read the key.
    pub required_suffix: Option<String>,
    pub focus: DialogField,
    /// The default button is Back.
    pub confirm_selected: bool,
    pub error: Option<String>,
}

/// A screen over the view that the next key closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlay {
    /// Every key of the view, from the action table.
    Help,
    /// What this console is connected to, as whom.
    About,
}

/// A one-line prompt at the bottom of the screen.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// The filter, typed into `filter_text`.
    Filter,
    /// An instant to travel to, as typed.
    Instant(String),
}

const NOT_IN_HISTORY: &str =
    "the instant can be moved in time travel only: start with effectwatch --at TIME";

#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub text: String,
    pub role: Role,
}

pub struct App {
    pub view: usize,
    pub lists: [ListState; VIEW_COUNT],
    pub models: [TableModel; VIEW_COUNT],
    pub totals: [i64; VIEW_COUNT],
    /// When the data on screen was read (the start of its poll): how old
    /// it is, whatever the connection is doing now.
    pub data_since: Option<Instant>,
    /// The server polled (`host:port/db`), named while it does not answer.
    pub server: Option<String>,
    pub offsets: [usize; 4],
    pub snapshot: Option<Box<Snapshot>>,
    pub connection: Connection,
    pub detail: Option<Detail>,
    pub filter_text: String,
    pub filter: Filter,
    /// The one-line prompt the operator is typing into, if any.
    pub prompt: Option<Prompt>,
    pub paused: bool,
    pub poll_interval: Duration,
    pub read_only: bool,
    pub operator: String,
    /// What covers the view until the next key, if anything.
    pub overlay: Option<Overlay>,
    /// What the about overlay lists: label and value, given by the runtime
    /// (server, operator, mode; the demo adds how a second operator joins).
    pub about: Vec<(String, String)>,
    pub dialog: Option<Dialog>,
    pub status: Option<Status>,
    /// When set, the console shows panes as they were at this instant.
    pub at: Option<DateTime<Utc>>,
    pub page_size: usize,
    /// What runs beside the console (the demo's agents), shown when idle.
    pub background: Option<String>,
    pending_jump_to_end: bool,
}

impl App {
    pub fn new(operator: String, read_only: bool, poll_interval: Duration) -> App {
        App {
            view: 0,
            lists: Default::default(),
            models: Default::default(),
            totals: [0; VIEW_COUNT],
            data_since: None,
            server: None,
            offsets: [0; 4],
            snapshot: None,
            connection: Connection::Connecting,
            detail: None,
            filter_text: String::new(),
            filter: Filter::default(),
            prompt: None,
            paused: false,
            poll_interval,
            read_only,
            operator,
            overlay: None,
            about: Vec::new(),
            dialog: None,
            status: None,
            at: None,
            page_size: 20,
            background: None,
            pending_jump_to_end: false,
        }
    }

    pub fn editing_filter(&self) -> bool {
        self.prompt == Some(Prompt::Filter)
    }

    pub fn current_view(&self) -> View {
        VIEWS[self.view]
    }

    pub fn model(&self) -> &TableModel {
        &self.models[self.view]
    }

    fn pane_index(&self) -> Option<usize> {
        match self.current_view() {
            View::Pane(pane) => Pane::ALL.iter().position(|p| *p == pane),
            _ => None,
        }
    }

    pub fn selected_row(&self) -> Option<&model::Row> {
        self.model().rows.get(self.lists[self.view].selected)
    }

    /// The effect an action would apply to: the open detail, else the selected row.
    pub fn selected_effect(&self) -> Option<(String, i64)> {
        if let Some(detail) = &self.detail {
            let version = detail.history.as_ref().map(|h| h.effect.version)?;
            return Some((detail.op_key.clone(), version));
        }
        let row = self.selected_row()?;
        Some((row.op_key.clone()?, row.version?))
    }

    /// The target and amount of the selected effect, for a confirmation
    /// that says what will move: " (invoice:INV-402, 150.00 EUR)".
    fn selected_context(&self) -> String {
        let (target, amount) = if let Some(effect) = self
            .detail
            .as_ref()
            .and_then(|d| d.history.as_ref())
            .map(|h| &h.effect)
        {
            (
                Some(effect.target.clone()),
                Some(crate::format::optional_money(
                    effect.amount_minor,
                    effect.currency.as_deref(),
                )),
            )
        } else {
            let model = self.model();
            let cell = |title: &str| {
                let column = model.columns.iter().position(|c| c.title == title)?;
                Some(self.selected_row()?.cells.get(column)?.text.clone())
            };
            (cell("target"), cell("amount"))
        };
        match (target, amount) {
            (Some(target), Some(amount)) => {
                format!(" ({}, {amount})", crate::text::sanitize_line(&target))
            }
            (Some(target), None) => format!(" ({})", crate::text::sanitize_line(&target)),
            _ => String::new(),
        }
    }

    pub fn set_status(&mut self, text: impl Into<String>, role: Role) {
        self.status = Some(Status {
            text: text.into(),
            role,
        });
    }

    pub fn update(&mut self, message: Message) -> Vec<Command> {
        match message {
            Message::Key(key) => self.on_key(key),
            Message::Snapshot(snapshot) => {
                self.apply_snapshot(snapshot);
                self.connection = Connection::Live;
                self.refresh_detail()
            }
            Message::PollFailed(error) => {
                if !matches!(self.connection, Connection::Stale { .. }) {
                    self.connection = Connection::Stale {
                        since: Instant::now(),
                        error,
                    };
                } else if let Connection::Stale { error: last, .. } = &mut self.connection {
                    *last = error;
                }
                Vec::new()
            }
            Message::Detail(op_key, result) => {
                if let Some(detail) = &mut self.detail
                    && detail.op_key == op_key
                {
                    match result {
                        Ok(history) => {
                            detail.history = Some(history);
                            detail.error = None;
                        }
                        Err(error) => detail.error = Some(error),
                    }
                }
                Vec::new()
            }
            Message::Performed(result) => {
                match result {
                    Ok(summary) => self.set_status(format!("✓ {summary}"), Role::Ok),
                    Err(error) => self.set_status(format!("✗ {error}"), Role::Critical),
                }
                let mut commands = vec![Command::Repoll];
                commands.extend(self.refresh_detail());
                commands
            }
            Message::Notice(text) => {
                self.set_status(text, Role::Warn);
                Vec::new()
            }
            Message::Tick => Vec::new(),
        }
    }

    fn refresh_detail(&self) -> Vec<Command> {
        match &self.detail {
            Some(detail) => vec![Command::LoadDetail(detail.op_key.clone())],
            None => Vec::new(),
        }
    }

    /// Replaces the data while keeping each selection on its item.
    pub fn apply_snapshot(&mut self, snapshot: Box<Snapshot>) {
        self.data_since = Some(
            Instant::now()
                .checked_sub(snapshot.latency)
                .unwrap_or_else(Instant::now),
        );
        for pane in Pane::ALL {
            let index = View::Pane(pane).index();
            if let Some((_, rows)) = snapshot.panes.iter().find(|(p, _)| *p == pane) {
                self.models[index] = model::pane_model(rows);
            }
            self.totals[index] = snapshot
                .counts
                .iter()
                .find(|(p, _)| *p == pane)
                .map(|(_, count)| *count)
                .unwrap_or(self.models[index].rows.len() as i64);
        }
        let escalations = self.filtered_escalations(&snapshot.escalations);
        let approvals: Vec<ApprovalRow> = snapshot
            .approvals
            .iter()
            .filter(|row| self.matches_filter_text(&[&row.op_key, &row.requested_by, &row.target]))
            .cloned()
            .collect();
        let escalations_view = View::Escalations.index();
        self.models[escalations_view] = model::escalation_model(&escalations, &approvals);
        self.totals[escalations_view] = snapshot
            .escalation_count
            .unwrap_or((escalations.len() + approvals.len()) as i64);
        if let Some(finance) = &snapshot.finance {
            let suspected: Vec<_> = finance
                .suspected
                .iter()
                .filter(|row| self.matches_filter_text(&[&row.op_key, &row.target, &row.action]))
                .cloned()
                .collect();
            self.models[View::Finance.index()] = model::finance_model(&suspected);
            self.totals[View::Finance.index()] = suspected.len() as i64;
        }
        let audit: Vec<AuditEntry> = snapshot
            .audit
            .iter()
            .filter(|entry| {
                self.matches_filter_text(&[
                    entry.op_key.as_deref().unwrap_or(""),
                    &entry.operator,
                    &entry.action,
                ])
            })
            .cloned()
            .collect();
        self.models[View::Audit.index()] = model::audit_model(&audit);
        self.totals[View::Audit.index()] = snapshot.audit_count.unwrap_or(audit.len() as i64);
        self.offsets = snapshot.offsets;
        // The table models hold what is shown; the raw rows would only
        // double the memory of a large window.
        let mut snapshot = snapshot;
        snapshot.panes.clear();
        self.snapshot = Some(snapshot);
        for view in 0..VIEWS.len() {
            if let Some((column, descending)) = self.lists[view].sort {
                self.models[view].sort(column, descending);
            }
            self.reselect(view);
        }
        if self.pending_jump_to_end {
            self.pending_jump_to_end = false;
            let last = self.models[self.view].rows.len().saturating_sub(1);
            self.select(self.view, last);
        }
    }

    fn filtered_escalations(&self, rows: &[EscalationRow]) -> Vec<EscalationRow> {
        rows.iter()
            .filter(|row| {
                self.matches_filter_text(&[
                    &row.op_key,
                    &row.sink,
                    &row.created_by,
                    &row.decision_needed,
                ])
            })
            .cloned()
            .collect()
    }

    /// Client-side filtering for the small views (escalations, audit); the
    /// panes are filtered in SQL by the poller.
    fn matches_filter_text(&self, fields: &[&str]) -> bool {
        self.filter.terms.iter().all(|(_, value)| {
            let value = value.to_lowercase();
            fields
                .iter()
                .any(|field| field.to_lowercase().contains(&value))
        })
    }

    fn reselect(&mut self, view: usize) {
        let list = &self.lists[view];
        let model = &self.models[view];
        let index = list
            .selected_id
            .as_deref()
            .and_then(|id| model.position(id))
            .unwrap_or_else(|| list.selected.min(model.rows.len().saturating_sub(1)));
        self.select(view, index);
    }

    fn select(&mut self, view: usize, index: usize) {
        let model = &self.models[view];
        let index = index.min(model.rows.len().saturating_sub(1));
        self.lists[view].selected = index;
        self.lists[view].selected_id = model.rows.get(index).map(|row| row.id.clone());
    }

    fn on_key(&mut self, key: KeyEvent) -> Vec<Command> {
        if self.dialog.is_some() {
            return self.on_dialog_key(key);
        }
        match &self.prompt {
            Some(Prompt::Filter) => return self.on_filter_key(key),
            Some(Prompt::Instant(_)) => return self.on_instant_key(key),
            None => {}
        }
        if self.overlay.take().is_some() {
            return Vec::new();
        }
        match Action::from_key(key) {
            Some(action) => self.perform(action),
            None => Vec::new(),
        }
    }

    /// The one dispatcher: read-only refusal happens here, for every view.
    pub fn perform(&mut self, action: Action) -> Vec<Command> {
        if !action.allowed(self.read_only) {
            self.set_status(
                format!("read-only: {} is not available", action.info().description),
                Role::Warn,
            );
            return Vec::new();
        }
        if action.writes() {
            return self.open_dialog(action);
        }
        let view = self.view;
        let rows = self.models[view].rows.len();
        match action {
            Action::Quit => return vec![Command::Quit],
            Action::Help => self.overlay = Some(Overlay::Help),
            Action::About => self.overlay = Some(Overlay::About),
            Action::NextView => return self.go_to_view((self.view + 1) % VIEWS.len()),
            Action::PrevView => {
                return self.go_to_view((self.view + VIEWS.len() - 1) % VIEWS.len());
            }
            Action::GoToView(index) => return self.go_to_view(index.min(VIEWS.len() - 1)),
            Action::Up if self.detail.is_some() => self.scroll_detail(-1),
            Action::Down if self.detail.is_some() => self.scroll_detail(1),
            Action::PageUp if self.detail.is_some() => self.scroll_detail(-(self.page_size as i32)),
            Action::PageDown if self.detail.is_some() => self.scroll_detail(self.page_size as i32),
            Action::Up => {
                if self.lists[view].selected == 0 {
                    return self.move_window(-1);
                }
                self.select(view, self.lists[view].selected.saturating_sub(1));
            }
            Action::Down => {
                if self.lists[view].selected + 1 >= rows {
                    return self.move_window(1);
                }
                self.select(view, self.lists[view].selected + 1);
            }
            Action::PageUp => self.select(
                view,
                self.lists[view].selected.saturating_sub(self.page_size),
            ),
            Action::PageDown => self.select(view, self.lists[view].selected + self.page_size),
            Action::Home => {
                self.select(view, 0);
                if let Some(pane) = self.pane_index()
                    && self.offsets[pane] > 0
                {
                    self.offsets[pane] = 0;
                    self.lists[view].selected_id = None;
                    return vec![Command::Repoll];
                }
            }
            Action::End => {
                self.select(view, rows.saturating_sub(1));
                if let Some(pane) = self.pane_index() {
                    let total = self.totals[view].max(0) as usize;
                    let last_window = total.saturating_sub(WINDOW);
                    if self.offsets[pane] < last_window {
                        self.offsets[pane] = last_window;
                        self.pending_jump_to_end = true;
                        return vec![Command::Repoll];
                    }
                }
            }
            Action::Open => {
                if let Some((op_key, _)) = self
                    .selected_row()
                    .and_then(|row| row.op_key.clone().map(|k| (k, ())))
                {
                    self.detail = Some(Detail {
                        op_key: op_key.clone(),
                        history: None,
                        error: None,
                        scroll: 0,
                    });
                    return vec![Command::LoadDetail(op_key)];
                }
            }
            Action::Back => {
                if self.detail.is_some() {
                    self.detail = None;
                } else if !self.filter_text.is_empty() {
                    self.filter_text.clear();
                    self.filter = Filter::default();
                    self.offsets = [0; 4];
                    return vec![Command::Repoll];
                }
            }
            Action::Filter => {
                self.prompt = Some(Prompt::Filter);
            }
            Action::Step(minutes) => return self.step_instant(minutes),
            Action::TypeInstant => {
                let Some(at) = self.at else {
                    self.set_status(NOT_IN_HISTORY, Role::Muted);
                    return Vec::new();
                };
                self.prompt = Some(Prompt::Instant(
                    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                ));
            }
            Action::SortNext => {
                let columns = self.models[view].columns.len();
                let next = match self.lists[view].sort {
                    None => 0,
                    Some((column, _)) if column + 1 < columns => column + 1,
                    Some(_) => {
                        self.lists[view].sort = None;
                        self.set_status("sort: ledger order (most urgent first)", Role::Muted);
                        return vec![Command::Repoll];
                    }
                };
                self.lists[view].sort = Some((next, false));
                self.sort_view(view);
            }
            Action::SortReverse => {
                if let Some((column, descending)) = self.lists[view].sort {
                    self.lists[view].sort = Some((column, !descending));
                    self.sort_view(view);
                }
            }
            Action::Pause => {
                self.paused = !self.paused;
                self.set_status(
                    if self.paused {
                        "‖ polling paused (p resumes)"
                    } else {
                        "▶ polling resumed"
                    },
                    Role::Muted,
                );
                return vec![Command::Repoll];
            }
            Action::Copy => {
                if let Some((op_key, _)) = self.selected_effect() {
                    // A newline in a pasted key would run the rest as a shell command.
                    if crate::text::sanitize_line(&op_key) != op_key {
                        self.set_status(
                            "this key contains control characters: not copied; use `effectwatch show`",
                            Role::Warn,
                        );
                        return Vec::new();
                    }
                    self.set_status(
                        format!("copied {}", crate::text::sanitize_line(&op_key)),
                        Role::Ok,
                    );
                    return vec![Command::Copy(op_key)];
                }
            }
            Action::Faster | Action::Slower => {
                let seconds = self.poll_interval.as_secs_f64();
                let next = if action == Action::Faster {
                    (seconds / 2.0).max(0.25)
                } else {
                    (seconds * 2.0).min(300.0)
                };
                self.poll_interval = Duration::from_secs_f64(next);
                self.set_status(format!("polling every {next:.2} s"), Role::Muted);
                return vec![Command::Repoll];
            }
            Action::Refresh => return vec![Command::Repoll],
            _ => {}
        }
        Vec::new()
    }

    fn sort_view(&mut self, view: usize) {
        if let Some((column, descending)) = self.lists[view].sort {
            self.models[view].sort(column, descending);
            let title = self.models[view]
                .columns
                .get(column)
                .map(|c| c.title)
                .unwrap_or("?");
            let arrow = if descending { "↓" } else { "↑" };
            self.set_status(
                format!("sorted by {title} {arrow} (within the loaded rows)"),
                Role::Muted,
            );
        }
        self.reselect(view);
    }

    fn move_window(&mut self, direction: i64) -> Vec<Command> {
        let Some(pane) = self.pane_index() else {
            return Vec::new();
        };
        let total = self.totals[self.view].max(0) as usize;
        let offset = self.offsets[pane];
        let next = if direction > 0 {
            let end = offset + self.models[self.view].rows.len();
            if end >= total {
                return Vec::new();
            }
            offset + WINDOW / 2
        } else {
            if offset == 0 {
                return Vec::new();
            }
            offset.saturating_sub(WINDOW / 2)
        };
        self.offsets[pane] = next;
        vec![Command::Repoll]
    }

    /// The finance view is read only while open, so entering or leaving
    /// it changes what the poller reads.
    fn go_to_view(&mut self, index: usize) -> Vec<Command> {
        let finance_before = self.current_view() == View::Finance;
        self.view = index;
        self.detail = None;
        if finance_before != (self.current_view() == View::Finance) {
            vec![Command::Repoll]
        } else {
            Vec::new()
        }
    }

    fn scroll_detail(&mut self, delta: i32) {
        if let Some(detail) = &mut self.detail {
            detail.scroll = (detail.scroll as i32 + delta).max(0) as u16;
        }
    }

    fn on_filter_key(&mut self, key: KeyEvent) -> Vec<Command> {
        match key.code {
            KeyCode::Enter => {
                self.prompt = None;
                self.apply_filter()
            }
            KeyCode::Esc => {
                self.prompt = None;
                self.filter_text.clear();
                self.apply_filter()
            }
            _ => {
                edit_line(&mut self.filter_text, key, usize::MAX);
                Vec::new()
            }
        }
    }

    /// Moves a time-travel console's instant; never past now, which is the
    /// live console's.
    fn step_instant(&mut self, minutes: i64) -> Vec<Command> {
        let Some(at) = self.at else {
            self.set_status(NOT_IN_HISTORY, Role::Muted);
            return Vec::new();
        };
        self.travel_to(at + chrono::Duration::minutes(minutes))
    }

    fn travel_to(&mut self, wanted: DateTime<Utc>) -> Vec<Command> {
        let now = Utc::now();
        let at = wanted.min(now);
        self.at = Some(at);
        self.offsets = [0; 4];
        let shown = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        if wanted > now {
            self.set_status(
                format!("⏲ {shown}: that is now (the live console is effectwatch without --at)"),
                Role::Warn,
            );
        } else {
            self.set_status(format!("⏲ as of {shown}"), Role::Muted);
        }
        vec![Command::Repoll]
    }

    fn on_instant_key(&mut self, key: KeyEvent) -> Vec<Command> {
        let Some(Prompt::Instant(text)) = &mut self.prompt else {
            return Vec::new();
        };
        match key.code {
            KeyCode::Enter => match crate::time_args::parse_instant(text) {
                Ok(at) => {
                    self.prompt = None;
                    self.travel_to(at)
                }
                Err(problem) => {
                    self.set_status(problem, Role::Critical);
                    Vec::new()
                }
            },
            KeyCode::Esc => {
                self.prompt = None;
                Vec::new()
            }
            _ => {
                edit_line(text, key, 64);
                Vec::new()
            }
        }
    }

    fn apply_filter(&mut self) -> Vec<Command> {
        match Filter::parse(&self.filter_text) {
            Ok(filter) => {
                self.filter = filter;
                self.offsets = [0; 4];
                if let Some(snapshot) = self.snapshot.clone() {
                    self.apply_snapshot(snapshot);
                }
                vec![Command::Repoll]
            }
            Err(error) => {
                self.set_status(format!("filter: {error}"), Role::Critical);
                self.prompt = Some(Prompt::Filter);
                Vec::new()
            }
        }
    }

    fn open_dialog(&mut self, action: Action) -> Vec<Command> {
        let info = action.info();
        let (subject, summary) = match info.scope {
            Scope::Pane => {
                let targets: Vec<(String, i64)> = self.models[self.view]
                    .rows
                    .iter()
                    .filter_map(|row| Some((row.op_key.clone()?, row.version?)))
                    .collect();
                if targets.is_empty() || self.detail.is_some() {
                    self.set_status("nothing to reconcile in this view", Role::Muted);
                    return Vec::new();
                }
                let filtered = if self.filter.is_empty() {
                    String::new()
                } else {
                    format!(" matching {:?}", self.filter_text)
                };
                let summary = format!(
                    "Ask the provider about {} effects of {}{filtered}, one after the other.",
                    targets.len(),
                    self.current_view().title()
                );
                (Subject::Pane { targets }, summary)
            }
            Scope::Escalation => {
                let Some(row) = self.selected_row().filter(|row| {
                    self.current_view() == View::Escalations && !row.id.starts_with(APPROVAL_ROW)
                }) else {
                    self.set_status("select an escalation first (view 5)", Role::Muted);
                    return Vec::new();
                };
                let summary = format!(
                    "{} {}",
                    info.description,
                    crate::text::sanitize_line(&row.id)
                );
                let escalation_key = row.id.clone();
                (Subject::Escalation { escalation_key }, summary)
            }
            Scope::Effect | Scope::Everywhere | Scope::History => {
                let Some((op_key, seen)) = self.selected_effect() else {
                    self.set_status("select an effect first", Role::Muted);
                    return Vec::new();
                };
                let summary = format!(
                    "{} — {}{}",
                    info.description,
                    crate::text::sanitize_line(&op_key),
                    self.selected_context()
                );
                (Subject::Effect { op_key, seen }, summary)
            }
        };
        let required_suffix = match (&subject, info.confirmation) {
            (Subject::Effect { op_key, .. }, Confirmation::ReasonAndKey) => {
                Some(key_suffix(op_key))
            }
            _ => None,
        };
        let fields = action.dialog_fields();
        self.dialog = Some(Dialog {
            action,
            title: action_title(action).to_string(),
            summary,
            subject,
            reason: String::new(),
            external_ref: String::new(),
            key_suffix: String::new(),
            retryable: false,
            required_suffix,
            focus: fields[0],
            confirm_selected: false,
            error: None,
        });
        Vec::new()
    }

    fn on_dialog_key(&mut self, key: KeyEvent) -> Vec<Command> {
        let Some(dialog) = &mut self.dialog else {
            return Vec::new();
        };
        let fields = dialog.action.dialog_fields();
        match key.code {
            KeyCode::Esc => {
                self.dialog = None;
                self.set_status("backed out: nothing written", Role::Muted);
                return Vec::new();
            }
            KeyCode::Tab | KeyCode::Down => {
                let at = fields.iter().position(|f| *f == dialog.focus).unwrap_or(0);
                dialog.focus = fields[(at + 1) % fields.len()];
            }
            KeyCode::BackTab | KeyCode::Up => {
                let at = fields.iter().position(|f| *f == dialog.focus).unwrap_or(0);
                dialog.focus = fields[(at + fields.len() - 1) % fields.len()];
            }
            KeyCode::Left | KeyCode::Right if dialog.focus == DialogField::Buttons => {
                dialog.confirm_selected = !dialog.confirm_selected;
            }
            KeyCode::Enter => {
                if dialog.focus != DialogField::Buttons {
                    // Enter in a field moves on, and in the last one submits a
                    // valid form: it never lands on Back, where a second Enter
                    // would throw the typed text away.
                    let at = fields.iter().position(|f| *f == dialog.focus).unwrap_or(0);
                    let next = fields[(at + 1) % fields.len()];
                    if next != DialogField::Buttons {
                        dialog.focus = next;
                        return Vec::new();
                    }
                } else if !dialog.confirm_selected {
                    self.dialog = None;
                    self.set_status("backed out: nothing written", Role::Muted);
                    return Vec::new();
                }
                if let Err(problem) = validate_dialog(dialog) {
                    dialog.error = Some(problem);
                    return Vec::new();
                }
                let dialog = self.dialog.take().expect("dialog is open");
                let what = action_title(dialog.action);
                self.set_status(
                    match &dialog.subject {
                        Subject::Pane { targets } => format!("… {what}: {} effects", targets.len()),
                        _ => format!("… {what}"),
                    },
                    Role::Muted,
                );
                let answers = Answers {
                    reason: dialog.reason.trim().to_string(),
                    external_ref: dialog.external_ref.trim().to_string(),
                    retryable: dialog.retryable,
                };
                return match dialog.action.request(dialog.subject, answers) {
                    Some(request) => vec![Command::Perform(request)],
                    None => {
                        self.set_status(format!("{what}: does not apply here"), Role::Warn);
                        Vec::new()
                    }
                };
            }
            KeyCode::Backspace => {
                if let Some(text) = dialog_text(dialog) {
                    text.pop();
                }
            }
            KeyCode::Char(ch) if !ch.is_control() => {
                if let Some(text) = dialog_text(dialog) {
                    if text.chars().count() < 500 {
                        text.push(ch);
                    }
                } else if dialog.focus == DialogField::Retryable {
                    match ch {
                        ' ' => dialog.retryable = !dialog.retryable,
                        'y' | 'Y' => dialog.retryable = true,
                        'n' | 'N' => dialog.retryable = false,
                        _ => {}
                    }
                } else if dialog.focus == DialogField::Buttons {
                    match ch {
                        'y' | 'Y' => dialog.confirm_selected = true,
                        'n' | 'N' => dialog.confirm_selected = false,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        Vec::new()
    }
}

/// The dialog's title and the status line's word: the description up to its colon.
fn action_title(action: Action) -> &'static str {
    let description = action.info().description;
    description.split(':').next().unwrap_or(description)
}

/// The one-line prompts' editing keys: Backspace, Ctrl-U to clear, and
/// printable characters up to `max`.
fn edit_line(text: &mut String, key: KeyEvent, max: usize) {
    match key.code {
        KeyCode::Backspace => {
            text.pop();
        }
        KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => text.clear(),
        KeyCode::Char(ch) if !ch.is_control() && text.chars().count() < max => text.push(ch),
        _ => {}
    }
}

fn dialog_text(dialog: &mut Dialog) -> Option<&mut String> {
    match dialog.focus {
        DialogField::Reason => Some(&mut dialog.reason),
        DialogField::ExternalRef => Some(&mut dialog.external_ref),
        DialogField::KeySuffix => Some(&mut dialog.key_suffix),
        DialogField::Retryable | DialogField::Buttons => None,
    }
}

fn validate_dialog(dialog: &Dialog) -> Result<(), String> {
    let confirmation = dialog.action.info().confirmation;
    if matches!(
        confirmation,
        Confirmation::Reason | Confirmation::ReasonAndKey
    ) && dialog.reason.trim().is_empty()
    {
        return Err("a reason is required".to_string());
    }
    if dialog.action.info().asks_external_ref && dialog.external_ref.trim().is_empty() {
        return Err("the provider's external reference is required".to_string());
    }
    if let Some(required) = &dialog.required_suffix
        && dialog.key_suffix.trim() != required
    {
        return Err(format!("type {required:?} (the end of the key) to confirm"));
    }
    Ok(())
}

/// What an operator types to confirm a money move: the key's last
/// segment, ignoring a version suffix (`refund:INV-402:AP-91:v1` asks for
/// `AP-91`), since almost every key ends in the same `:v1`.
pub fn key_suffix(op_key: &str) -> String {
    let clean = crate::text::sanitize_line(op_key);
    let segments: Vec<&str> = clean.split(':').filter(|s| !s.is_empty()).collect();
    let is_version = |s: &str| {
        let digits = s.trim_start_matches(['v', 'V']);
        s.len() < 5 && !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    };
    let segment = segments
        .iter()
        .rev()
        .find(|s| !is_version(s))
        .copied()
        .unwrap_or(&clean);
    let chars: Vec<char> = segment.chars().collect();
    let take = chars.len().clamp(1, 8).min(chars.len());
    chars[chars.len() - take..].iter().collect()
}

#[cfg(test)]
mod tests {
    use super::key_suffix;

    #[test]
    fn the_confirmation_skips_the_version_suffix() {
        assert_eq!(key_suffix("refund:INV-402:AP-91:v1"), "AP-91");
        assert_eq!(key_suffix("compensate:refund:INV-9:a:1"), "a");
        assert_eq!(key_suffix("webhook:evt_1Q8xK2LmNp"), "8xK2LmNp");
        assert_eq!(key_suffix("plain"), "plain");
    }
}
