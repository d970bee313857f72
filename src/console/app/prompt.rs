//! The one-line prompts: the filter and, in time travel, the instant.

use chrono::{DateTime, Utc};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::{App, Mode, Task, View};
use crate::console::theme::Role;
use crate::ledger::panes::{Filter, Pane, Scope};

/// A one-line prompt at the bottom of the screen.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// The filter, typed into `filter_text`.
    Filter,
    /// An instant to travel to, as typed.
    Instant(String),
    /// A key to open, as typed.
    OpenKey(String),
}

pub(super) const NOT_IN_HISTORY: &str =
    "the instant can be moved in time travel only: start with effectwatch --at TIME";

impl App {
    pub(super) fn on_filter_key(&mut self, key: KeyEvent) -> Vec<Task> {
        match key.code {
            KeyCode::Enter => {
                self.mode = Mode::Browse;
                self.apply_filter()
            }
            KeyCode::Esc => {
                self.mode = Mode::Browse;
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
    pub(super) fn step_instant(&mut self, minutes: i64) -> Vec<Task> {
        let Some(at) = self.at else {
            self.set_status(NOT_IN_HISTORY, Role::Muted);
            return Vec::new();
        };
        self.travel_to(at + chrono::Duration::minutes(minutes))
    }

    fn travel_to(&mut self, wanted: DateTime<Utc>) -> Vec<Task> {
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
        vec![Task::Repoll]
    }

    pub(super) fn on_instant_key(&mut self, key: KeyEvent) -> Vec<Task> {
        let Mode::Prompt(Prompt::Instant(text)) = &mut self.mode else {
            return Vec::new();
        };
        match key.code {
            KeyCode::Enter => match crate::time_args::parse_instant(text) {
                Ok(at) => {
                    self.mode = Mode::Browse;
                    self.travel_to(at)
                }
                Err(problem) => {
                    self.set_status(problem, Role::Critical);
                    Vec::new()
                }
            },
            KeyCode::Esc => {
                self.mode = Mode::Browse;
                Vec::new()
            }
            _ => {
                edit_line(text, key, 64);
                // A new attempt: the last refusal no longer applies.
                self.status = None;
                Vec::new()
            }
        }
    }

    pub(super) fn on_open_key_key(&mut self, key: KeyEvent) -> Vec<Task> {
        let Mode::Prompt(Prompt::OpenKey(text)) = &mut self.mode else {
            return Vec::new();
        };
        match key.code {
            KeyCode::Enter => {
                let op_key = text.trim().to_string();
                self.mode = Mode::Browse;
                if op_key.is_empty() {
                    return Vec::new();
                }
                self.open_detail(op_key)
            }
            KeyCode::Esc => {
                self.mode = Mode::Browse;
                Vec::new()
            }
            // Keys are long: a pasted one may be a few hundred characters.
            _ => {
                edit_line(text, key, 1024);
                Vec::new()
            }
        }
    }

    /// The duplicates pane lists the keys that need a look; `v` adds the
    /// ones the ledger answered by itself, through the filter, so the
    /// filter line says what is shown and the command line can ask the same.
    pub(super) fn show_replays(&mut self) -> Vec<Task> {
        if self.current_view() != View::Pane(Pane::Duplicates) || self.detail.is_some() {
            self.set_status(
                "v: lists the replays in the duplicates pane (3)",
                Role::Muted,
            );
            return Vec::new();
        }
        let filter = if self.filter.scopes.contains(&Scope::ReplaysOnly) {
            self.filter.toggled(Scope::ReplaysOnly)
        } else {
            self.filter.toggled(Scope::WithReplays)
        };
        self.filter_text = filter.text();
        self.apply_filter()
    }

    pub(super) fn apply_filter(&mut self) -> Vec<Task> {
        match Filter::parse(&self.filter_text) {
            Ok(filter) => {
                self.filter = filter;
                self.offsets = [0; 4];
                if let Some(snapshot) = self.snapshot.clone() {
                    self.apply_snapshot(snapshot);
                }
                vec![Task::Repoll]
            }
            Err(error) => {
                self.set_status(format!("filter: {error}"), Role::Critical);
                self.mode = Mode::Prompt(Prompt::Filter);
                Vec::new()
            }
        }
    }
}

/// The one-line prompts' editing keys: Backspace, Ctrl-U to clear, and
/// printable characters up to `max`.
pub(super) fn edit_line(text: &mut String, key: KeyEvent, max: usize) {
    match key.code {
        KeyCode::Backspace => {
            text.pop();
        }
        KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => text.clear(),
        KeyCode::Char(ch) if !ch.is_control() && text.chars().count() < max => text.push(ch),
        _ => {}
    }
}
