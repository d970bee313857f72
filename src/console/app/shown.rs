//! What the views read of the console's state: one read-only face of
//! [`App`], so that drawing never reaches into its fields or changes it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::{
    App, Connection, Detail, Dialog, ListState, Logged, Mode, Overlay, Prompt, Snapshot, Status,
    View,
};
use crate::console::action::Action;
use crate::console::model::{self, TableModel};
use crate::console::theme::Role;
use crate::ledger::panes::Filter;

/// The console's state as the views see it: answers only. Every method
/// takes `&self` and hands out shared borrows or copies, so nothing drawn
/// can change what it draws. [`App`] is the one implementation; the views
/// take `&dyn Shown`.
pub trait Shown {
    /// The view the tabs have selected.
    fn current_view(&self) -> View;
    /// The current view's rows, as filtered and sorted.
    fn model(&self) -> &TableModel;
    /// A view's selection and sort.
    fn list(&self, view: View) -> &ListState;
    /// How many items a view's pane holds, beyond the rows read.
    fn total(&self, view: View) -> i64;
    /// Where each pane's window of rows starts.
    fn offsets(&self) -> &[usize; 4];
    /// The last read, if any has arrived.
    fn snapshot(&self) -> Option<&Snapshot>;
    /// When the data on screen was read (the start of its poll).
    fn data_since(&self) -> Option<Instant>;
    /// Whether the last poll answered, and if not, what it said.
    fn connection(&self) -> &Connection;
    /// The server polled (`host:port/db`), named while it does not answer.
    fn server(&self) -> Option<&str>;
    /// Replay lag above which data read from a standby is called stale.
    fn replica_lag_stale_secs(&self) -> f64;
    /// The effect opened over the view, if any.
    fn detail(&self) -> Option<&Detail>;
    /// The filter as typed.
    fn filter_text(&self) -> &str;
    /// The filter as understood.
    fn filter(&self) -> &Filter;
    /// Whether the panes' rows on screen are the ones the filter in force
    /// returned.
    fn pane_rows_match_filter(&self) -> bool;
    fn is_paused(&self) -> bool;
    fn poll_interval(&self) -> Duration;
    fn is_read_only(&self) -> bool;
    fn operator(&self) -> &str;
    /// The theme drawn with: a built-in name, or the file it came from.
    fn theme(&self) -> &str;
    /// The instant shown under time travel; `None`: live.
    fn at(&self) -> Option<DateTime<Utc>>;
    /// The newest message, as it was said.
    fn status(&self) -> Option<&Status>;
    /// The status as it should read now: a message about another item
    /// than the one selected is faded. An item that left the view (an
    /// action took it off) leaves its message as it was: the selection
    /// moved on by itself, not the operator.
    fn status_now(&self) -> Option<Status>;
    /// Every result and refusal of the session, oldest first.
    fn messages(&self) -> &VecDeque<Logged>;
    /// The first-run hint kept at the right of the status line.
    fn hint(&self) -> Option<&str>;
    /// What runs beside the console (the demo's agents), shown when idle.
    fn background(&self) -> Option<&str>;
    /// What the about overlay lists: label and value.
    fn about(&self) -> &[(String, String)];
    /// The first line of the help shown.
    fn help_scroll(&self) -> usize;
    fn editing_filter(&self) -> bool;
    fn dialog(&self) -> Option<&Dialog>;
    fn prompt(&self) -> Option<&Prompt>;
    fn overlay(&self) -> Option<Overlay>;
    /// Why `action` does not apply to the selection; None: it may.
    fn why_not(&self, action: Action) -> Option<String>;
}

impl Shown for App {
    fn current_view(&self) -> View {
        App::current_view(self)
    }

    fn model(&self) -> &TableModel {
        App::model(self)
    }

    fn list(&self, view: View) -> &ListState {
        &self.lists[view]
    }

    fn total(&self, view: View) -> i64 {
        self.totals[view]
    }

    fn offsets(&self) -> &[usize; 4] {
        &self.offsets
    }

    fn snapshot(&self) -> Option<&Snapshot> {
        self.snapshot.as_deref()
    }

    fn data_since(&self) -> Option<Instant> {
        self.data_since
    }

    fn connection(&self) -> &Connection {
        &self.connection
    }

    fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }

    fn replica_lag_stale_secs(&self) -> f64 {
        self.replica_lag_stale_secs
    }

    fn detail(&self) -> Option<&Detail> {
        self.detail.as_ref()
    }

    fn filter_text(&self) -> &str {
        &self.filter_text
    }

    fn filter(&self) -> &Filter {
        &self.filter
    }

    fn pane_rows_match_filter(&self) -> bool {
        App::pane_rows_match_filter(self)
    }

    fn is_paused(&self) -> bool {
        self.paused
    }

    fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn operator(&self) -> &str {
        &self.operator
    }

    fn theme(&self) -> &str {
        &self.theme
    }

    fn at(&self) -> Option<DateTime<Utc>> {
        self.at
    }

    fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }

    fn status_now(&self) -> Option<Status> {
        let status = self.status.clone()?;
        let names =
            |row: &model::Row, item: &str| row.id == item || row.op_key.as_deref() == Some(item);
        let fades = status.about.as_deref().is_some_and(|about| {
            let selected = match &self.detail {
                Some(detail) => detail.op_key == about,
                None => self.selected_row().is_some_and(|row| names(row, about)),
            };
            let shown =
                self.detail.is_some() || self.model().rows.iter().any(|row| names(row, about));
            !selected && shown
        });
        if fades {
            Some(Status {
                role: Role::Muted,
                ..status
            })
        } else {
            Some(status)
        }
    }

    fn messages(&self) -> &VecDeque<Logged> {
        &self.messages
    }

    fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    fn background(&self) -> Option<&str> {
        self.background.as_deref()
    }

    fn about(&self) -> &[(String, String)] {
        &self.about
    }

    fn help_scroll(&self) -> usize {
        self.help_scroll
    }

    fn editing_filter(&self) -> bool {
        self.mode == Mode::Prompt(Prompt::Filter)
    }

    fn dialog(&self) -> Option<&Dialog> {
        match &self.mode {
            Mode::Dialog(dialog) => Some(dialog),
            _ => None,
        }
    }

    fn prompt(&self) -> Option<&Prompt> {
        match &self.mode {
            Mode::Prompt(prompt) => Some(prompt),
            _ => None,
        }
    }

    fn overlay(&self) -> Option<Overlay> {
        match &self.mode {
            Mode::Overlay(overlay) => Some(*overlay),
            _ => None,
        }
    }

    fn why_not(&self, action: Action) -> Option<String> {
        App::why_not(self, action)
    }
}
