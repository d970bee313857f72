//! Everything an operator can do in the console, in one table. The help
//! screen, the key bar and read-only filtering are all generated from it,
//! and read-only is enforced in one place: [`Action::allowed`].

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    Quit,
    Help,
    NextView,
    PrevView,
    GoToView(usize),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Open,
    Back,
    Filter,
    SortNext,
    SortReverse,
    Pause,
    Copy,
    Faster,
    Slower,
    Refresh,
    Reconcile,
    ReconcileAll,
    Compensate,
    Escalate,
    ResolveSucceeded,
    ResolveFailed,
    Release,
    Cancel,
    Annotate,
    Approve,
    Reject,
    Acknowledge,
    CloseEscalation,
}

/// What must happen before a writing action runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    None,
    /// A dialog whose default is Cancel.
    Confirm,
    /// A dialog with a required reason.
    Reason,
    /// Moves money: a reason and the last characters of the key, typed.
    ReasonAndKey,
}

/// Where an action applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Everywhere,
    /// Needs a selected effect (a pane row or the detail view).
    Effect,
    /// Needs a selected escalation.
    Escalation,
}

pub struct ActionInfo {
    pub action: Action,
    pub keys: &'static str,
    /// One or two words for the key bar.
    pub label: &'static str,
    pub description: &'static str,
    pub writes: bool,
    pub confirmation: Confirmation,
    pub scope: Scope,
    /// Shown in the one-line key bar.
    pub in_key_bar: bool,
}

// One call per table row: positional arguments keep the table readable at a glance.
#[allow(clippy::too_many_arguments)]
const fn info(
    action: Action,
    keys: &'static str,
    label: &'static str,
    description: &'static str,
    writes: bool,
    confirmation: Confirmation,
    scope: Scope,
    in_key_bar: bool,
) -> ActionInfo {
    ActionInfo {
        action,
        keys,
        label,
        description,
        writes,
        confirmation,
        scope,
        in_key_bar,
    }
}

use Confirmation as C;
use Scope as S;

pub const TABLE: &[ActionInfo] = &[
    info(
        Action::Help,
        "?",
        "help",
        "help: every key of this view",
        false,
        C::None,
        S::Everywhere,
        true,
    ),
    info(
        Action::Quit,
        "q",
        "quit",
        "quit",
        false,
        C::None,
        S::Everywhere,
        true,
    ),
    info(
        Action::NextView,
        "Tab",
        "next view",
        "next view",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::PrevView,
        "S-Tab",
        "prev view",
        "previous view",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::GoToView(0),
        "1-7",
        "views",
        "go to a view: 1 overdue … 7 finance",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::Up,
        "↑/k",
        "up",
        "move up",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::Down,
        "↓/j",
        "down",
        "move down",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::PageUp,
        "PgUp",
        "page up",
        "page up",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::PageDown,
        "PgDn",
        "page down",
        "page down",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::Home,
        "Home/g",
        "first",
        "first item",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::End,
        "End/G",
        "last",
        "last item",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::Open,
        "Enter",
        "open",
        "open the effect: every field and its timeline",
        false,
        C::None,
        S::Effect,
        true,
    ),
    info(
        Action::Back,
        "Esc",
        "back",
        "back / clear filter",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::Filter,
        "/",
        "filter",
        "filter: words, or key: target: action: provider: requester:",
        false,
        C::None,
        S::Everywhere,
        true,
    ),
    info(
        Action::SortNext,
        "s",
        "sort",
        "sort by the next column",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::SortReverse,
        "S",
        "reverse",
        "reverse the sort",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::Pause,
        "p",
        "pause",
        "pause / resume polling",
        false,
        C::None,
        S::Everywhere,
        true,
    ),
    info(
        Action::Copy,
        "y",
        "copy key",
        "copy the key (OSC 52, works over SSH)",
        false,
        C::None,
        S::Effect,
        true,
    ),
    info(
        Action::Faster,
        "+",
        "faster",
        "poll more often",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::Slower,
        "-",
        "slower",
        "poll less often",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::Refresh,
        "F5/C-r",
        "refresh",
        "poll now",
        false,
        C::None,
        S::Everywhere,
        false,
    ),
    info(
        Action::Reconcile,
        "r",
        "reconcile",
        "reconcile: ask the provider what exists for this key",
        true,
        C::Confirm,
        S::Effect,
        true,
    ),
    info(
        Action::ReconcileAll,
        "R",
        "reconcile all",
        "reconcile every item of this (filtered) pane",
        true,
        C::Confirm,
        S::Everywhere,
        false,
    ),
    info(
        Action::Compensate,
        "c",
        "compensate",
        "compensate: reverse it with a new, linked effect",
        true,
        C::ReasonAndKey,
        S::Effect,
        true,
    ),
    info(
        Action::Escalate,
        "e",
        "escalate",
        "escalate to a person (the configured sink)",
        true,
        C::Reason,
        S::Effect,
        true,
    ),
    info(
        Action::ResolveSucceeded,
        "o",
        "resolve ✓",
        "resolve as succeeded, with the provider's reference",
        true,
        C::ReasonAndKey,
        S::Effect,
        false,
    ),
    info(
        Action::ResolveFailed,
        "f",
        "resolve ✗",
        "resolve by hand as failed",
        true,
        C::Reason,
        S::Effect,
        false,
    ),
    info(
        Action::Release,
        "l",
        "release",
        "release a hold: the held effect may be dispatched",
        true,
        C::Reason,
        S::Effect,
        false,
    ),
    info(
        Action::Cancel,
        "x",
        "cancel",
        "cancel a hold or an undispatched effect",
        true,
        C::Reason,
        S::Effect,
        false,
    ),
    info(
        Action::Annotate,
        "a",
        "annotate",
        "annotate: a note in the audit trail",
        true,
        C::Reason,
        S::Effect,
        false,
    ),
    info(
        Action::Approve,
        "A",
        "approve",
        "approve a compensation awaiting a second operator",
        true,
        C::ReasonAndKey,
        S::Effect,
        false,
    ),
    info(
        Action::Reject,
        "D",
        "reject",
        "reject a compensation awaiting approval",
        true,
        C::Reason,
        S::Effect,
        false,
    ),
    info(
        Action::Acknowledge,
        "K",
        "acknowledge",
        "acknowledge an escalation",
        true,
        C::Reason,
        S::Escalation,
        true,
    ),
    info(
        Action::CloseEscalation,
        "Z",
        "close",
        "resolve an escalation (close the loop)",
        true,
        C::Reason,
        S::Escalation,
        true,
    ),
];

impl Action {
    pub fn info(self) -> &'static ActionInfo {
        let lookup = match self {
            Action::GoToView(_) => Action::GoToView(0),
            other => other,
        };
        TABLE
            .iter()
            .find(|entry| entry.action == lookup)
            .expect("every action has a row in TABLE")
    }

    pub fn writes(self) -> bool {
        self.info().writes
    }

    /// The one gate for read-only mode.
    pub fn allowed(self, read_only: bool) -> bool {
        !(read_only && self.writes())
    }

    /// Maps a key press to an action; the key labels in TABLE describe these.
    pub fn from_key(key: KeyEvent) -> Option<Action> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        Some(match key.code {
            KeyCode::Char('c') if ctrl => Action::Quit,
            KeyCode::Char('r') if ctrl => Action::Refresh,
            KeyCode::Char('q') => Action::Quit,
            KeyCode::Char('?') => Action::Help,
            KeyCode::Tab => Action::NextView,
            KeyCode::BackTab => Action::PrevView,
            KeyCode::Char(digit @ '1'..='7') => Action::GoToView(digit as usize - '1' as usize),
            KeyCode::Up | KeyCode::Char('k') => Action::Up,
            KeyCode::Down | KeyCode::Char('j') => Action::Down,
            KeyCode::PageUp => Action::PageUp,
            KeyCode::PageDown => Action::PageDown,
            KeyCode::Home | KeyCode::Char('g') => Action::Home,
            KeyCode::End | KeyCode::Char('G') => Action::End,
            KeyCode::Enter => Action::Open,
            KeyCode::Esc => Action::Back,
            KeyCode::Char('/') => Action::Filter,
            KeyCode::Char('s') => Action::SortNext,
            KeyCode::Char('S') => Action::SortReverse,
            KeyCode::Char('p') => Action::Pause,
            KeyCode::Char('y') => Action::Copy,
            KeyCode::Char('+') | KeyCode::Char('=') => Action::Faster,
            KeyCode::Char('-') => Action::Slower,
            KeyCode::F(5) => Action::Refresh,
            KeyCode::Char('r') => Action::Reconcile,
            KeyCode::Char('R') => Action::ReconcileAll,
            KeyCode::Char('c') => Action::Compensate,
            KeyCode::Char('e') => Action::Escalate,
            KeyCode::Char('o') => Action::ResolveSucceeded,
            KeyCode::Char('f') => Action::ResolveFailed,
            KeyCode::Char('l') => Action::Release,
            KeyCode::Char('x') => Action::Cancel,
            KeyCode::Char('a') => Action::Annotate,
            KeyCode::Char('A') => Action::Approve,
            KeyCode::Char('D') => Action::Reject,
            KeyCode::Char('K') => Action::Acknowledge,
            KeyCode::Char('Z') => Action::CloseEscalation,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_has_one_row() {
        for entry in TABLE {
            let rows = TABLE
                .iter()
                .filter(|other| other.action == entry.action)
                .count();
            assert_eq!(rows, 1, "{:?}", entry.action);
        }
    }

    #[test]
    fn read_only_refuses_exactly_the_writing_actions() {
        for entry in TABLE {
            assert_eq!(
                entry.action.allowed(true),
                !entry.writes,
                "{:?}",
                entry.action
            );
            assert!(entry.action.allowed(false));
        }
        assert!(!Action::Compensate.allowed(true));
        assert!(Action::Open.allowed(true));
    }

    #[test]
    fn money_moving_actions_ask_for_the_key() {
        assert_eq!(
            Action::Compensate.info().confirmation,
            Confirmation::ReasonAndKey
        );
        for entry in TABLE.iter().filter(|entry| entry.writes) {
            assert_ne!(
                entry.confirmation,
                Confirmation::None,
                "{:?} writes without confirmation",
                entry.action
            );
        }
    }
}
