//! The console's state and its update function. Pure: it never touches the
//! database or the terminal; it returns [`Task`]s for the runtime to carry
//! out, and it is tested without either.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use crossterm::event::KeyEvent;

mod dialog;
mod navigation;
mod prompt;
mod settled;
mod shown;
mod snapshot;

use std::ops::{Index, IndexMut};

pub use self::dialog::{Dialog, key_suffix};
use self::prompt::NOT_IN_HISTORY;
pub use self::prompt::Prompt;
use self::settled::Acted;
pub use self::shown::Shown;
pub use self::snapshot::{Notifications, Snapshot};
pub use super::action::DialogField;
use super::action::{Action, Use};
use super::model::{self, APPROVAL_ROW, TableModel};
use super::theme::Role;
pub use super::view::{VIEW_COUNT, VIEWS, View};
use crate::console::theme::Theme;
use crate::ledger::actions::Applicability;
use crate::ledger::history::EffectHistory;
use crate::ledger::panes::{Filter, Pane};
use crate::settle::verbs::{self, On, Verb};
use crate::settle::{Request, Settled};

/// Rows fetched per pane and poll: memory and poll cost stay bounded however
/// many items are open; moving past the window fetches the next one.
pub const WINDOW: usize = 500;

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
pub enum Task {
    Quit,
    /// Poll settings (filter, interval, pause, window offsets) changed.
    Repoll,
    LoadDetail(String),
    /// Draw with this built-in theme from now on.
    SwitchTheme(&'static str),
    /// A writing action the operator confirmed, as the settling request it became.
    Settle(Request),
    Copy(String),
}

/// Messages into the update function.
#[derive(Debug, Clone)]
pub enum Message {
    Key(KeyEvent),
    Snapshot(Box<Snapshot>),
    PollFailed(String),
    Detail(String, Result<Box<EffectHistory>, String>),
    /// A request the operator confirmed, and what came of it.
    Settled {
        request: Request,
        result: Result<Settled, String>,
    },
    Notice(String),
    /// A line about work running beside the console (the demo's agents),
    /// shown when nothing else is; it comes with the clock's tick.
    Background(String),
    Tick,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListState {
    pub selected: usize,
    /// The id the selection follows across refreshes.
    pub selected_id: Option<String>,
    pub sort: Option<(usize, bool)>,
    /// The operator has looked at the view: from then on the selection
    /// follows its item; before, it stays on the first row, so a first
    /// visit starts at the top however many rows arrived above.
    pub visited: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Detail {
    pub op_key: String,
    pub history: Option<Box<EffectHistory>>,
    pub error: Option<String>,
    pub scroll: u16,
    /// The highlighted one of the effects it is tied to; Enter opens it.
    pub link: usize,
    /// The details a link was followed from, latest last: Esc goes back.
    pub trail: Vec<String>,
}

/// A screen over the view that the next key closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlay {
    /// Every key of the view, from the action table.
    Help,
    /// What this console is connected to, as whom.
    About,
    /// The session's messages, newest first.
    Messages,
    /// One audit entry, by its number: who, why, and what it changed.
    AuditEntry(i64),
}

/// What the keys go to: the view, or what the operator opened over it.
/// One at a time, so no key can reach two of them.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Mode {
    #[default]
    Browse,
    /// A screen over the view that the next key closes.
    Overlay(Overlay),
    /// A one-line prompt at the bottom of the screen.
    Prompt(Prompt),
    /// A writing action's confirmation (boxed: it is the largest by far).
    Dialog(Box<Dialog>),
}

/// One value per view, kept at the view's tab.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PerView<T>([T; VIEW_COUNT]);

impl<T> PerView<T> {
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (View, &mut T)> {
        VIEWS.into_iter().zip(self.0.iter_mut())
    }
}

impl<T> Index<View> for PerView<T> {
    type Output = T;

    fn index(&self, view: View) -> &T {
        &self.0[view.index()]
    }
}

impl<T> IndexMut<View> for PerView<T> {
    fn index_mut(&mut self, view: View) -> &mut T {
        &mut self.0[view.index()]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub text: String,
    pub role: Role,
    /// The selection the message is about, when it is: it fades once the
    /// selection moves to another item.
    pub(crate) about: Option<String>,
}

/// One message of the session's log.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
    pub at: chrono::DateTime<chrono::Utc>,
    pub text: String,
    pub role: Role,
    /// What it was about: the key(s) an action was done to, else the item
    /// selected when it was said.
    pub about: Option<String>,
}

/// The first keys of a list and how many more: enough to recognise what
/// an action on many items is about without a screenful of keys.
pub fn a_few_keys<K: AsRef<str>>(keys: &[K]) -> String {
    const NAMED: usize = 3;
    let named: Vec<String> = keys
        .iter()
        .take(NAMED)
        .map(|key| crate::text::sanitize_line(key.as_ref()))
        .collect();
    match keys.len().saturating_sub(NAMED) {
        0 => named.join(", "),
        more => format!("{} and {more} more", named.join(", ")),
    }
}

/// How many messages the log keeps: a long shift's worth.
pub const MESSAGE_LOG: usize = 1_000;

/// What the runtime decides before the console starts: who operates, how
/// often it polls, what it reads from and what it says first. The console
/// changes some of them as it runs (the poll interval, the instant, the
/// theme); the rest it only shows.
#[derive(Debug, Clone)]
pub struct Settings {
    pub operator: String,
    pub read_only: bool,
    pub poll_interval: Duration,
    /// Time travel: the panes as they were at this instant (read-only).
    pub at: Option<DateTime<Utc>>,
    /// A built-in theme's name, or the file it came from.
    pub theme: String,
    /// Replay lag above which data read from a standby is called stale.
    pub replica_lag_stale_secs: f64,
    /// The server polled (`host:port/db`), named while it does not answer.
    pub server: Option<String>,
    /// What the about overlay lists: label and value (server, operator,
    /// mode; the demo adds how a second operator joins).
    pub about: Vec<(String, String)>,
    /// A first-run hint, kept at the right of the status line beside any
    /// message until the operator opens what it points to (`i`).
    pub hint: Option<String>,
    /// What the console says first, in parts joined by ` · `: the parts
    /// that name a key (`i: how a second operator joins`) become the hint
    /// (unless one is given), the others the first message, so the
    /// status line says each once.
    pub welcome: Option<String>,
}

impl Settings {
    /// A live console on the dark theme, with nothing to say first.
    pub fn new(operator: impl Into<String>, read_only: bool, poll_interval: Duration) -> Settings {
        Settings {
            operator: operator.into(),
            read_only,
            poll_interval,
            at: None,
            theme: "dark".to_string(),
            replica_lag_stale_secs: 30.0,
            server: None,
            about: Vec::new(),
            hint: None,
            welcome: None,
        }
    }
}

/// What the poller reads, as the console's state says: the filter, the
/// pages, the instant, whether it is paused.
#[derive(Debug, Clone, PartialEq)]
pub struct PollSettings {
    pub filter: crate::ledger::panes::Filter,
    pub interval: std::time::Duration,
    pub paused: bool,
    pub offsets: [usize; 4],
    /// Time travel: read the panes as they were at this instant.
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    /// Actions the console settled: a new one reads the finance review
    /// again at once (a compensation changes what is at risk).
    pub settled_actions: u64,
}

/// A welcome's message and its hint: the parts that name a key (`i: …`,
/// `?: …`) are the hint, the rest the message; either may be empty.
fn split_welcome(welcome: &str) -> (Option<String>, Option<String>) {
    let (keys, words): (Vec<&str>, Vec<&str>) = welcome
        .split(" · ")
        .partition(|part| part.chars().nth(1) == Some(':'));
    let joined = |parts: Vec<&str>| (!parts.is_empty()).then(|| parts.join(" · "));
    (joined(words), joined(keys))
}

pub struct App {
    view: View,
    lists: PerView<ListState>,
    models: PerView<TableModel>,
    totals: PerView<i64>,
    /// When the data on screen was read (the start of its poll): how old
    /// it is, whatever the connection is doing now.
    data_since: Option<Instant>,
    /// The server polled (`host:port/db`), named while it does not answer.
    server: Option<String>,
    offsets: [usize; 4],
    snapshot: Option<Box<Snapshot>>,
    connection: Connection,
    detail: Option<Detail>,
    filter_text: String,
    filter: Filter,
    mode: Mode,
    paused: bool,
    /// Actions settled this session: the finance review is read again
    /// after each, not only every half minute.
    settled_actions: u64,
    poll_interval: Duration,
    read_only: bool,
    operator: String,
    /// What the about overlay lists: label and value, given by the runtime
    /// (server, operator, mode; the demo adds how a second operator joins).
    about: Vec<(String, String)>,
    status: Option<Status>,
    /// Every result and refusal of the session, oldest first.
    messages: std::collections::VecDeque<Logged>,
    /// When set, the console shows panes as they were at this instant.
    at: Option<DateTime<Utc>>,
    page_size: usize,
    /// The theme drawn with: a built-in name, or the file it came from.
    theme: String,
    /// Replay lag above which data read from a standby is called stale.
    replica_lag_stale_secs: f64,
    /// A first-run hint (the demo: how a second operator joins), kept at
    /// the right of the status line beside any message until the operator
    /// opens what it points to (`i`).
    hint: Option<String>,
    /// What runs beside the console (the demo's agents), shown when idle.
    background: Option<String>,
    /// What the console's own actions did, until a read shows it.
    acted: Vec<Acted>,
    /// The held items, as last read, whose agents have not asked for them
    /// within their pending window: a release says so, and offers cancel.
    stopped_asking: std::collections::HashSet<String>,
    pending_jump_to_end: bool,
    /// The first line of the help shown: it scrolls when taller than the
    /// terminal.
    help_scroll: usize,
    /// What the last frame's help could show, which the keys scroll
    /// within: the one thing drawing tells the state, since only drawing
    /// knows the terminal's size and how the help wraps in it.
    help_room: std::cell::Cell<HelpRoom>,
}

/// How far the help scrolls, as the last frame laid it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HelpRoom {
    /// The greatest first line: 0 when the help fits.
    pub last_first: usize,
    /// Lines a page moves.
    pub page: usize,
}

impl App {
    /// A console under `--at` is read-only whatever it was asked: a past
    /// instant is no place to write from.
    pub fn new(settings: Settings) -> App {
        let Settings {
            operator,
            read_only,
            poll_interval,
            at,
            theme,
            replica_lag_stale_secs,
            server,
            about,
            hint,
            welcome,
        } = settings;
        let (first_message, welcome_hint) =
            welcome.as_deref().map(split_welcome).unwrap_or_default();
        let mut app = App {
            view: VIEWS[0],
            lists: PerView::default(),
            models: PerView::default(),
            totals: PerView::default(),
            data_since: None,
            server,
            offsets: [0; 4],
            snapshot: None,
            connection: Connection::Connecting,
            detail: None,
            filter_text: String::new(),
            filter: Filter::default(),
            mode: Mode::Browse,
            paused: false,
            settled_actions: 0,
            poll_interval,
            read_only: read_only || at.is_some(),
            operator,
            about,
            status: None,
            messages: std::collections::VecDeque::new(),
            at,
            page_size: 20,
            theme,
            replica_lag_stale_secs,
            hint: hint.or(welcome_hint),
            background: None,
            acted: Vec::new(),
            stopped_asking: Default::default(),
            pending_jump_to_end: false,
            help_scroll: 0,
            help_room: Default::default(),
        };
        if let Some(message) = first_message {
            app.set_status(message, Role::Accent);
        }
        app
    }

    /// The rows a view shows, as filtered and sorted.
    pub fn model_of(&self, view: View) -> &TableModel {
        &self.models[view]
    }

    /// Makes the data on screen `age` old, as if its poll started then.
    /// The console has no clock of its own to fake: this is how a test
    /// shows a poll that has not answered for a while.
    pub fn set_data_age(&mut self, age: Duration) {
        self.data_since = Some(Instant::now().checked_sub(age).unwrap_or_else(Instant::now));
    }

    /// How many rows a page moves: what the terminal's `height` shows of a
    /// table, below the header, tabs, title, status and key bar.
    pub fn fit_to_height(&mut self, height: u16) {
        self.page_size = height.saturating_sub(7).max(1) as usize;
    }

    /// What the last frame's help could show, which the keys then scroll
    /// within: the one thing drawing tells the state, since only drawing
    /// knows the terminal's size and how the help wraps in it.
    pub fn help_laid_out(&self, room: HelpRoom) {
        self.help_room.set(room);
    }

    /// What the poller reads, as the console's state asks for it.
    pub fn poll_settings(&self) -> PollSettings {
        PollSettings {
            filter: self.filter.clone(),
            interval: self.poll_interval,
            paused: self.paused,
            offsets: self.offsets,
            at: self.at,
            settled_actions: self.settled_actions,
        }
    }

    pub fn current_view(&self) -> View {
        self.view
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

    /// What the ledger said, at the last read, an operator may do with the
    /// selected effect (the open detail, else the selected row).
    pub fn selected_applicability(&self) -> Option<&Applicability> {
        match &self.detail {
            Some(detail) => Some(&detail.history.as_ref()?.applicability),
            None => {
                let op_key = self.selected_row()?.op_key.as_ref()?;
                self.snapshot.as_ref()?.applicability.get(op_key)
            }
        }
    }

    /// Why `action` does not apply to the selection; None: it may (the
    /// ledger still has the last word when it runs). The ledger's rules,
    /// read with the effect, and what the console learnt since: an action
    /// of its own whose outcome the next read must show first, a
    /// compensation the operator asked for themselves, an escalation
    /// already in the state asked for.
    pub fn why_not(&self, action: Action) -> Option<String> {
        let Action::Verb(verb, how) = action else {
            return None;
        };
        // A verb done to every item is not ruled by the one selected: each
        // item it does not apply to is skipped and counted.
        if how == Use::EveryItem {
            return None;
        }
        if verb.on == On::Escalation {
            return self.why_not_escalation(verb);
        }
        let (op_key, _) = self.selected_effect()?;
        if let Some(acted) = self.awaiting_read(&op_key) {
            let paused = if self.paused {
                " (polling is paused: p resumes)"
            } else {
                ""
            };
            return Some(format!(
                "{} changed with your {} just now: the next read says what applies to it{paused}",
                crate::text::sanitize_line(&op_key),
                acted.by
            ));
        }
        if *verb == verbs::APPROVE
            && let Some(why) = self.approving_own_request(&op_key)
        {
            return Some(why);
        }
        let name = action.ledger_action()?;
        self.selected_applicability()?.refused.get(name).cloned()
    }

    /// The ledger refuses an operator's approval of a compensation they
    /// requested (by name, and by login): said before the reason and the
    /// key's end are typed, not after.
    fn approving_own_request(&self, op_key: &str) -> Option<String> {
        let request = self
            .snapshot
            .as_ref()?
            .approvals
            .iter()
            .find(|row| row.op_key == op_key)?;
        // Compared as the ledger compares them: trimmed, in any case.
        let normalised = |name: &str| name.trim().to_lowercase();
        (normalised(&request.requested_by) == normalised(&self.operator)).then(|| {
            format!(
                "{} requested this compensation: a second, different operator must approve it",
                crate::text::sanitize_line(&request.requested_by)
            )
        })
    }

    /// An escalation already in the state asked for is left as it is by
    /// the ledger (`unchanged`), and a resolved one is done with.
    fn why_not_escalation(&self, verb: &Verb) -> Option<String> {
        let asked = if *verb == verbs::ACKNOWLEDGE_ESCALATION {
            "acknowledged"
        } else if *verb == verbs::RESOLVE_ESCALATION {
            "resolved"
        } else {
            return None;
        };
        let row = self.selected_row().filter(|row| {
            self.detail.is_none()
                && self.current_view() == View::Escalations
                && !row.id.starts_with(APPROVAL_ROW)
        })?;
        let state = self.escalation_state(&row.id)?;
        (state == asked || state == "resolved")
            .then(|| format!("the escalation is {state} already"))
    }

    /// Whether the panes' rows on screen are the ones the filter in force
    /// returned: a new filter shows the previous one's rows until its
    /// first read arrives. Before any read there are no rows to be wrong.
    pub fn pane_rows_match_filter(&self) -> bool {
        self.snapshot
            .as_ref()
            .is_none_or(|snapshot| snapshot.filter == self.filter)
    }

    /// Whether the selected effect was recorded but never claimed for a
    /// provider call (`○ prepared`).
    fn selected_never_dispatched(&self) -> bool {
        if let Some(effect) = self
            .detail
            .as_ref()
            .and_then(|d| d.history.as_ref())
            .map(|h| &h.effect)
        {
            return effect.dispatched_at.is_none() && effect.state == crate::ledger::State::Pending;
        }
        self.selected_row()
            .is_some_and(|row| row.cells.iter().any(|cell| cell.text == "○ prepared"))
    }

    /// The selected effect's amount, in minor units, when it has one.
    fn selected_amount(&self) -> Option<i64> {
        if let Some(effect) = self
            .detail
            .as_ref()
            .and_then(|d| d.history.as_ref())
            .map(|h| &h.effect)
        {
            return effect.amount_minor;
        }
        let model = self.model();
        let column = model.columns.iter().position(|c| c.title == "amount")?;
        match &self.selected_row()?.cells.get(column)?.sort {
            crate::console::model::SortValue::Money { minor, .. } if *minor != i64::MIN => {
                Some(*minor)
            }
            _ => None,
        }
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

    /// A message about the selection (the open detail, else the selected item).
    pub fn set_status(&mut self, text: impl Into<String>, role: Role) {
        let about = self
            .detail
            .as_ref()
            .map(|detail| detail.op_key.clone())
            .or_else(|| self.lists[self.view].selected_id.clone());
        self.say(text.into(), role, about.clone(), about);
    }

    /// The result of an action, about the keys it was done to, whatever is
    /// selected when it arrives: the log heads it with them, and the status
    /// line fades it once another item is selected (a result about many
    /// items is about the pane, and does not).
    fn report(&mut self, text: String, role: Role, keys: &[String]) {
        let heading = (!keys.is_empty()).then(|| a_few_keys(keys));
        let about = match keys {
            [one] => Some(one.clone()),
            _ => None,
        };
        self.say(text, role, heading, about);
    }

    fn say(&mut self, text: String, role: Role, heading: Option<String>, about: Option<String>) {
        // Results and refusals are kept whole; what only says where the
        // operator is (sorted, paused, backed out) is not.
        if role != Role::Muted {
            if self.messages.len() == MESSAGE_LOG {
                self.messages.pop_front();
            }
            self.messages.push_back(Logged {
                at: chrono::Utc::now(),
                text: text.clone(),
                role,
                about: heading,
            });
        }
        self.status = Some(Status { text, role, about });
    }

    pub fn update(&mut self, message: Message) -> Vec<Task> {
        match message {
            Message::Key(key) => self.on_key(key),
            Message::Snapshot(snapshot) => {
                let before = self.snapshot.as_ref().and_then(|s| s.server.clone());
                let was_standby = self.snapshot.as_ref().map(|s| s.replica_lag.is_some());
                if let (Some(before), Some(now)) = (before, &snapshot.server)
                    && &before != now
                {
                    self.set_status(
                        format!("the ledger moved: reading {now} now (was {before})"),
                        Role::Warn,
                    );
                } else if let Some(was_standby) = was_standby
                    && self.at.is_none()
                    && was_standby != snapshot.replica_lag.is_some()
                {
                    let server = snapshot
                        .server
                        .clone()
                        .unwrap_or_else(|| "the server".into());
                    self.set_status(
                        if was_standby {
                            format!("{server} was promoted: this console reads the primary now")
                        } else {
                            format!("{server} is a standby now: changes show at each poll")
                        },
                        Role::Warn,
                    );
                }
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
            Message::Settled { request, result } => self.on_settled(request, result),
            Message::Notice(text) => {
                self.set_status(text, Role::Warn);
                Vec::new()
            }
            Message::Background(line) => {
                self.background = Some(line);
                Vec::new()
            }
            Message::Tick => Vec::new(),
        }
    }

    fn refresh_detail(&self) -> Vec<Task> {
        match &self.detail {
            Some(detail) => vec![Task::LoadDetail(detail.op_key.clone())],
            None => Vec::new(),
        }
    }

    fn on_key(&mut self, key: KeyEvent) -> Vec<Task> {
        match &self.mode {
            Mode::Dialog(_) => self.on_dialog_key(key),
            Mode::Prompt(Prompt::Filter) => self.on_filter_key(key),
            Mode::Prompt(Prompt::Instant(_)) => self.on_instant_key(key),
            Mode::Prompt(Prompt::OpenKey(_)) => self.on_open_key_key(key),
            Mode::Overlay(Overlay::Help) => self.on_help_key(key),
            Mode::Overlay(_) => {
                self.mode = Mode::Browse;
                Vec::new()
            }
            Mode::Browse => match Action::from_key(key) {
                Some(action) => self.dispatch(action),
                None => Vec::new(),
            },
        }
    }

    /// The one dispatcher: read-only refusal happens here, for every view.
    pub fn dispatch(&mut self, action: Action) -> Vec<Task> {
        if !action.allowed(self.read_only) {
            self.set_status(
                format!("read-only: {} is not available", action.info().description),
                Role::Warn,
            );
            return Vec::new();
        }
        if action.writes() {
            // Asking for a reason and the key's end only to refuse after
            // wastes the operator's typing: say at once what the ledger said.
            if let Some(why) = self.why_not(action) {
                let message = format!("cannot {}: {why}", action.info().label);
                self.set_status(message, Role::Warn);
                return Vec::new();
            }
            return self.open_dialog(action);
        }
        let view = self.view;
        match action {
            Action::Quit => vec![Task::Quit],
            Action::Help => self.show(Overlay::Help),
            Action::About => {
                self.hint = None;
                self.show(Overlay::About)
            }
            Action::Messages => self.show(Overlay::Messages),
            Action::NextView => self.go_to_view(VIEWS[(view.index() + 1) % VIEW_COUNT]),
            Action::PrevView => {
                self.go_to_view(VIEWS[(view.index() + VIEW_COUNT - 1) % VIEW_COUNT])
            }
            Action::GoToView(view) => self.go_to_view(view),
            Action::Up
            | Action::Down
            | Action::PageUp
            | Action::PageDown
            | Action::Home
            | Action::End => self.navigate(action),
            Action::SortNext => self.sort_next(),
            Action::SortReverse => self.sort_reverse(),
            Action::Open => self.open_selected(),
            Action::Back => self.back(),
            Action::Filter => {
                self.mode = Mode::Prompt(Prompt::Filter);
                Vec::new()
            }
            Action::OpenKey => {
                self.mode = Mode::Prompt(Prompt::OpenKey(String::new()));
                Vec::new()
            }
            Action::ShowReplays => self.show_replays(),
            Action::NextLink => self.next_link(),
            Action::NextTheme => self.next_theme(),
            Action::Step(minutes) => self.step_instant(minutes),
            Action::TypeInstant => self.type_instant(),
            Action::Pause => self.toggle_pause(),
            Action::Copy => self.copy_selected(),
            Action::Faster | Action::Slower => self.change_interval(action == Action::Faster),
            Action::Refresh => vec![Task::Repoll],
            _ => Vec::new(),
        }
    }

    /// Cycles the built-in themes; a theme from a file is left for the first.
    fn next_theme(&mut self) -> Vec<Task> {
        let next = Theme::next_built_in(&self.theme);
        self.theme = next.to_string();
        self.set_status(
            format!("theme: {next} (T: next; --theme {next} or theme = \"{next}\" in the config keeps it)"),
            Role::Muted,
        );
        vec![Task::SwitchTheme(next)]
    }

    fn show(&mut self, overlay: Overlay) -> Vec<Task> {
        self.mode = Mode::Overlay(overlay);
        self.help_scroll = 0;
        Vec::new()
    }

    /// The keys that move scroll the help; any other closes it.
    fn on_help_key(&mut self, key: KeyEvent) -> Vec<Task> {
        let HelpRoom { last_first, page } = self.help_room.get();
        let at = self.help_scroll.min(last_first);
        self.help_scroll = match Action::from_key(key) {
            Some(Action::Up) => at.saturating_sub(1),
            Some(Action::Down) => (at + 1).min(last_first),
            Some(Action::PageUp) => at.saturating_sub(page.max(1)),
            Some(Action::PageDown) => (at + page.max(1)).min(last_first),
            Some(Action::Home) => 0,
            Some(Action::End) => last_first,
            _ => {
                self.mode = Mode::Browse;
                return Vec::new();
            }
        };
        Vec::new()
    }

    /// The finance view is read only while open, so entering or leaving
    /// it changes what the poller reads.
    fn go_to_view(&mut self, view: View) -> Vec<Task> {
        let finance_before = self.current_view() == View::Finance;
        if !self.lists[view].visited {
            self.lists[view].visited = true;
            self.select(view, 0);
        }
        self.view = view;
        self.detail = None;
        if finance_before != (self.current_view() == View::Finance) {
            vec![Task::Repoll]
        } else {
            Vec::new()
        }
    }
}
