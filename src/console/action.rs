//! Everything an operator can do in the console, in one table: the keys
//! that run it, the help line, the key bar, whether it writes, what its
//! dialog asks and the settling request the dialog's answers become. Key
//! handling, help, the key bar and read-only filtering are all read from
//! it, and read-only is enforced in one place: [`Action::allowed`].

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::view::View;
use crate::ledger::actions::{self, OperatorCall, Resolution};
use crate::ledger::panes::Pane;
use crate::settle::Request;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Quit,
    Help,
    About,
    /// The session's results and refusals, newest first, whole.
    Messages,
    NextView,
    PrevView,
    GoToView(View),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Open,
    Back,
    /// A prompt for any key: opens its detail, in a pane or not.
    OpenKey,
    /// In the detail: highlight the next effect it is tied to.
    NextLink,
    /// The next built-in theme, live.
    NextTheme,
    Filter,
    /// Duplicates: list the keys the ledger answered by itself too, or not.
    ShowReplays,
    SortNext,
    SortReverse,
    Pause,
    Copy,
    Faster,
    Slower,
    Refresh,
    /// Time travel: move the instant by this many minutes.
    Step(i64),
    /// Time travel: type the instant.
    TypeInstant,
    Reconcile,
    ReconcileAll,
    Compensate,
    /// Reverse one extra provider record of the effect (the effect stands).
    ReverseDuplicate,
    Escalate,
    /// Escalate every item of the (filtered) pane.
    EscalateAll,
    ResolveSucceeded,
    ResolveFailed,
    /// An operator call of the common shape (release, cancel, annotate, …):
    /// its row below is all the console needs to offer it.
    Operator(&'static OperatorCall),
    /// The same call for every item of the (filtered) pane.
    OperatorAll(&'static OperatorCall),
    Approve,
    Reject,
    Acknowledge,
    CloseEscalation,
}

/// What must happen before a writing action runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    None,
    /// A dialog whose default is Back (nothing written).
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
    /// Every effect the current (filtered) pane lists.
    Pane,
    /// Needs a selected escalation.
    Escalation,
    /// Only a time-travel console (`effectwatch --at`) has an instant to move.
    History,
}

/// A field of an action's dialog, in the order the dialog shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialogField {
    /// The provider's reference for an effect settled by hand as succeeded.
    ExternalRef,
    Reason,
    /// Whether the same key may be dispatched again (resolve as failed).
    Retryable,
    KeySuffix,
    Buttons,
}

/// What a writing action is about, as the dialog found it.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    /// An effect and the version the operator saw.
    Effect {
        op_key: String,
        seen: i64,
    },
    /// Every effect of the pane, each with the version the operator saw.
    Pane {
        targets: Vec<(String, i64)>,
    },
    Escalation {
        escalation_key: String,
    },
}

/// What the operator typed into the dialog, trimmed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    pub reason: String,
    pub external_ref: String,
    pub retryable: bool,
}

/// A key that runs an action: a character, or another key, with or without Ctrl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    code: KeyCode,
    ctrl: bool,
}

const fn key(ch: char) -> Binding {
    Binding {
        code: KeyCode::Char(ch),
        ctrl: false,
    }
}

const fn ctrl(ch: char) -> Binding {
    Binding {
        code: KeyCode::Char(ch),
        ctrl: true,
    }
}

const fn special(code: KeyCode) -> Binding {
    Binding { code, ctrl: false }
}

/// How the dialog's answers become the settling request.
pub type MakeRequest = fn(Action, Subject, Answers) -> Option<Request>;

pub struct ActionInfo {
    pub action: Action,
    /// The keys as the help screen and the key bar show them.
    pub keys: &'static str,
    pub bindings: &'static [Binding],
    /// One or two words for the key bar.
    pub label: &'static str,
    pub description: &'static str,
    pub writes: bool,
    pub confirmation: Confirmation,
    /// The dialog asks for the provider's reference too.
    pub asks_external_ref: bool,
    /// The dialog offers "the same key may be dispatched again".
    pub asks_retryable: bool,
    pub scope: Scope,
    /// Shown in the one-line key bar everywhere.
    pub in_key_bar: bool,
    /// Shown in the key bar in these views, where it is what matters most.
    pub featured_in: &'static [View],
    /// For a writing action: the request its confirmed dialog sends.
    pub request: Option<MakeRequest>,
}

/// A row that only moves, shows or polls: no dialog, no request.
const SHOWS: ActionInfo = ActionInfo {
    action: Action::Help,
    keys: "",
    bindings: &[],
    label: "",
    description: "",
    writes: false,
    confirmation: Confirmation::None,
    asks_external_ref: false,
    asks_retryable: false,
    scope: Scope::Everywhere,
    in_key_bar: false,
    featured_in: &[],
    request: None,
};

/// A row that writes to the ledger for a selected effect, with a reason.
const WRITES: ActionInfo = ActionInfo {
    writes: true,
    confirmation: Confirmation::Reason,
    scope: Scope::Effect,
    ..SHOWS
};

fn on_effect(
    subject: Subject,
    make: impl FnOnce(String, Option<i64>) -> Request,
) -> Option<Request> {
    match subject {
        Subject::Effect { op_key, seen } => Some(make(op_key, Some(seen))),
        _ => None,
    }
}

fn on_escalation(subject: Subject, make: impl FnOnce(String) -> Request) -> Option<Request> {
    match subject {
        Subject::Escalation { escalation_key } => Some(make(escalation_key)),
        _ => None,
    }
}

/// The request of an [`Action::Operator`] row: its call, for the selected effect.
fn operator_call(action: Action, subject: Subject, answers: Answers) -> Option<Request> {
    let Action::Operator(call) = action else {
        return None;
    };
    on_effect(subject, |op_key, seen| Request::Operator {
        call,
        op_key,
        seen,
        reason: answers.reason,
    })
}

/// The request of an [`Action::OperatorAll`] row: its call, for every item
/// of the pane.
fn operator_call_all(action: Action, subject: Subject, answers: Answers) -> Option<Request> {
    let Action::OperatorAll(call) = action else {
        return None;
    };
    match subject {
        Subject::Pane { targets } => Some(Request::OperatorMany {
            call,
            targets,
            reason: answers.reason,
        }),
        _ => None,
    }
}

pub const TABLE: &[ActionInfo] = &[
    ActionInfo {
        action: Action::Help,
        keys: "?",
        bindings: &[key('?')],
        label: "help",
        description: "help: every key of this view",
        in_key_bar: true,
        ..SHOWS
    },
    ActionInfo {
        action: Action::About,
        keys: "i",
        bindings: &[key('i')],
        label: "about",
        description: "about this console: server, operator, how another operator joins",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Messages,
        keys: "M",
        bindings: &[key('M')],
        label: "messages",
        description: "messages: every result and refusal of this session, newest first, whole",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Quit,
        keys: "q",
        bindings: &[key('q'), ctrl('c')],
        label: "quit",
        description: "quit",
        in_key_bar: true,
        ..SHOWS
    },
    ActionInfo {
        action: Action::NextView,
        keys: "Tab",
        bindings: &[special(KeyCode::Tab)],
        label: "next view",
        description: "next view",
        ..SHOWS
    },
    ActionInfo {
        action: Action::PrevView,
        keys: "S-Tab",
        bindings: &[special(KeyCode::BackTab)],
        label: "prev view",
        description: "previous view",
        ..SHOWS
    },
    ActionInfo {
        action: Action::GoToView(View::Pane(Pane::Overdue)),
        keys: "1-7",
        bindings: &[],
        label: "views",
        description: "go to a view: 1 overdue … 7 finance",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Up,
        keys: "↑/k",
        bindings: &[special(KeyCode::Up), key('k')],
        label: "up",
        description: "move up",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Down,
        keys: "↓/j",
        bindings: &[special(KeyCode::Down), key('j')],
        label: "down",
        description: "move down",
        ..SHOWS
    },
    ActionInfo {
        action: Action::PageUp,
        keys: "PgUp",
        bindings: &[special(KeyCode::PageUp)],
        label: "page up",
        description: "page up",
        ..SHOWS
    },
    ActionInfo {
        action: Action::PageDown,
        keys: "PgDn",
        bindings: &[special(KeyCode::PageDown)],
        label: "page down",
        description: "page down",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Home,
        keys: "Home/g",
        bindings: &[special(KeyCode::Home), key('g')],
        label: "first",
        description: "first item",
        ..SHOWS
    },
    ActionInfo {
        action: Action::End,
        keys: "End/G",
        bindings: &[special(KeyCode::End), key('G')],
        label: "last",
        description: "last item",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Open,
        keys: "Enter",
        bindings: &[special(KeyCode::Enter)],
        label: "open",
        description: "open the effect: every field and its timeline",
        scope: Scope::Effect,
        in_key_bar: true,
        ..SHOWS
    },
    ActionInfo {
        action: Action::Back,
        keys: "Esc",
        bindings: &[special(KeyCode::Esc)],
        label: "back",
        description: "back (along links followed) / clear filter",
        ..SHOWS
    },
    ActionInfo {
        action: Action::OpenKey,
        keys: ":",
        bindings: &[key(':')],
        label: "open key",
        description: "open any key, in a pane or not (from a ticket)",
        ..SHOWS
    },
    ActionInfo {
        action: Action::NextLink,
        keys: "n",
        bindings: &[key('n')],
        label: "next link",
        description: "detail: next tied effect (Enter opens, Esc back)",
        ..SHOWS
    },
    ActionInfo {
        action: Action::NextTheme,
        keys: "T",
        bindings: &[key('T')],
        label: "theme",
        description: "next theme: dark, light, high-contrast, colour-blind",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Filter,
        keys: "/",
        bindings: &[key('/')],
        label: "filter",
        description: "filter: words, or field:value (key target action state …)",
        in_key_bar: true,
        ..SHOWS
    },
    ActionInfo {
        action: Action::ShowReplays,
        keys: "v",
        bindings: &[key('v')],
        label: "replays",
        description: "duplicates: list the keys only replayed too, or hide them",
        featured_in: &[View::Pane(Pane::Duplicates)],
        ..SHOWS
    },
    ActionInfo {
        action: Action::SortNext,
        keys: "s",
        bindings: &[key('s')],
        label: "sort",
        description: "sort by the next column",
        ..SHOWS
    },
    ActionInfo {
        action: Action::SortReverse,
        keys: "S",
        bindings: &[key('S')],
        label: "reverse",
        description: "reverse the sort",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Pause,
        keys: "p",
        bindings: &[key('p')],
        label: "pause",
        description: "pause / resume polling",
        in_key_bar: true,
        ..SHOWS
    },
    ActionInfo {
        action: Action::Copy,
        keys: "y",
        bindings: &[key('y')],
        label: "copy key",
        description: "copy the key (OSC 52, works over SSH)",
        scope: Scope::Effect,
        in_key_bar: true,
        ..SHOWS
    },
    ActionInfo {
        action: Action::Faster,
        keys: "+",
        bindings: &[key('+'), key('=')],
        label: "faster",
        description: "poll more often",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Slower,
        keys: "-",
        bindings: &[key('-')],
        label: "slower",
        description: "poll less often",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Refresh,
        keys: "F5/C-r",
        bindings: &[special(KeyCode::F(5)), ctrl('r')],
        label: "refresh",
        description: "poll now",
        ..SHOWS
    },
    ActionInfo {
        action: Action::Step(-1),
        keys: "[",
        bindings: &[key('[')],
        label: "-1 min",
        description: "a minute earlier",
        scope: Scope::History,
        in_key_bar: true,
        ..SHOWS
    },
    ActionInfo {
        action: Action::Step(1),
        keys: "]",
        bindings: &[key(']')],
        label: "+1 min",
        description: "a minute later (never past now)",
        scope: Scope::History,
        in_key_bar: true,
        ..SHOWS
    },
    ActionInfo {
        action: Action::Step(-10),
        keys: "{",
        bindings: &[key('{')],
        label: "-10",
        description: "ten minutes earlier",
        scope: Scope::History,
        ..SHOWS
    },
    ActionInfo {
        action: Action::Step(10),
        keys: "}",
        bindings: &[key('}')],
        label: "+10",
        description: "ten minutes later (never past now)",
        scope: Scope::History,
        ..SHOWS
    },
    ActionInfo {
        action: Action::TypeInstant,
        keys: "t",
        bindings: &[key('t')],
        label: "instant",
        description: "type the instant: RFC 3339, a date, or a time ago (2h)",
        scope: Scope::History,
        in_key_bar: true,
        ..SHOWS
    },
    ActionInfo {
        action: Action::Reconcile,
        keys: "r",
        bindings: &[key('r')],
        label: "reconcile",
        description: "reconcile: ask the provider what exists for this key",
        confirmation: Confirmation::Confirm,
        in_key_bar: true,
        request: Some(|_, subject, _| {
            on_effect(subject, |op_key, seen| Request::Reconcile { op_key, seen })
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::OperatorAll(&actions::ACKNOWLEDGE_DUPLICATES),
        keys: "C",
        bindings: &[key('C')],
        label: "clear all",
        description: "acknowledge the repeats of every item of this (filtered) pane",
        scope: Scope::Pane,
        featured_in: &[View::Pane(Pane::Duplicates)],
        request: Some(operator_call_all),
        ..WRITES
    },
    ActionInfo {
        action: Action::OperatorAll(&actions::RELEASE),
        keys: "L",
        bindings: &[key('L')],
        label: "release all",
        description: "release every held item of this (filtered) pane",
        scope: Scope::Pane,
        featured_in: &[View::Pane(Pane::Held)],
        request: Some(operator_call_all),
        ..WRITES
    },
    ActionInfo {
        action: Action::OperatorAll(&actions::CANCEL),
        keys: "X",
        bindings: &[key('X')],
        label: "cancel all",
        description: "cancel every item of this (filtered) pane that was never sent",
        scope: Scope::Pane,
        featured_in: &[View::Pane(Pane::Held)],
        request: Some(operator_call_all),
        ..WRITES
    },
    ActionInfo {
        action: Action::ReconcileAll,
        keys: "R",
        bindings: &[key('R')],
        label: "reconcile all",
        description: "reconcile every item of this (filtered) pane",
        confirmation: Confirmation::Confirm,
        scope: Scope::Pane,
        request: Some(|_, subject, _| match subject {
            Subject::Pane { targets } => Some(Request::ReconcileMany { targets }),
            _ => None,
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::Compensate,
        keys: "c",
        bindings: &[key('c')],
        label: "compensate",
        description: "compensate: reverse it with a new, linked effect",
        confirmation: Confirmation::ReasonAndKey,
        in_key_bar: true,
        request: Some(|_, subject, answers| {
            on_effect(subject, |op_key, seen| Request::Compensate {
                op_key,
                seen,
                reason: answers.reason,
            })
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::ReverseDuplicate,
        keys: "u",
        bindings: &[key('u')],
        label: "reverse dup",
        description: "reverse one extra provider record; the effect stands",
        confirmation: Confirmation::ReasonAndKey,
        asks_external_ref: true,
        featured_in: &[View::Finance],
        request: Some(|_, subject, answers| {
            on_effect(subject, |op_key, seen| Request::ReverseDuplicate {
                op_key,
                seen,
                duplicate_ref: answers.external_ref,
                reason: answers.reason,
            })
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::Escalate,
        keys: "e",
        bindings: &[key('e')],
        label: "escalate",
        description: "escalate to a person (the configured sink)",
        in_key_bar: true,
        request: Some(|_, subject, answers| {
            on_effect(subject, |op_key, seen| Request::Escalate {
                op_key,
                seen,
                sink: None,
                reason: answers.reason,
            })
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::EscalateAll,
        keys: "E",
        bindings: &[key('E')],
        label: "escalate all",
        description: "escalate every item of this (filtered) pane to a person",
        scope: Scope::Pane,
        request: Some(|_, subject, answers| match subject {
            Subject::Pane { targets } => Some(Request::EscalateMany {
                targets,
                sink: None,
                reason: answers.reason,
            }),
            _ => None,
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::ResolveSucceeded,
        keys: "o",
        bindings: &[key('o')],
        label: "resolve ✓",
        description: "resolve as succeeded, with the provider's reference",
        confirmation: Confirmation::ReasonAndKey,
        asks_external_ref: true,
        featured_in: &[View::Pane(Pane::Overdue)],
        request: Some(|_, subject, answers| {
            on_effect(subject, |op_key, seen| Request::Resolve {
                op_key,
                seen,
                reason: answers.reason,
                resolution: Resolution::Succeeded {
                    external_ref: answers.external_ref,
                },
            })
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::ResolveFailed,
        keys: "f",
        bindings: &[key('f')],
        label: "resolve ✗",
        description: "resolve by hand as failed",
        featured_in: &[View::Pane(Pane::Overdue)],
        request: Some(|_, subject, answers| {
            on_effect(subject, |op_key, seen| Request::Resolve {
                op_key,
                seen,
                reason: answers.reason,
                resolution: Resolution::Failed {
                    retryable: answers.retryable,
                },
            })
        }),
        asks_retryable: true,
        ..WRITES
    },
    ActionInfo {
        action: Action::Operator(&actions::RELEASE),
        keys: "l",
        bindings: &[key('l')],
        label: "release",
        description: "release a hold: the held effect may be dispatched",
        featured_in: &[View::Pane(Pane::Held)],
        request: Some(operator_call),
        ..WRITES
    },
    ActionInfo {
        action: Action::Operator(&actions::CANCEL),
        keys: "x",
        bindings: &[key('x')],
        label: "cancel",
        description: "cancel a hold or an undispatched effect",
        featured_in: &[View::Pane(Pane::Held)],
        request: Some(operator_call),
        ..WRITES
    },
    ActionInfo {
        action: Action::Operator(&actions::ANNOTATE),
        keys: "a",
        bindings: &[key('a')],
        label: "annotate",
        description: "annotate: a note in the audit trail",
        request: Some(operator_call),
        ..WRITES
    },
    ActionInfo {
        action: Action::Operator(&actions::ACKNOWLEDGE_DUPLICATES),
        keys: "d",
        bindings: &[key('d')],
        label: "ack repeats",
        description: "acknowledge repeats: off this pane, kept in history",
        featured_in: &[View::Pane(Pane::Duplicates)],
        request: Some(operator_call),
        ..WRITES
    },
    ActionInfo {
        action: Action::Approve,
        keys: "A",
        bindings: &[key('A')],
        label: "approve",
        description: "approve a compensation awaiting a second operator",
        confirmation: Confirmation::ReasonAndKey,
        featured_in: &[View::Escalations],
        request: Some(|_, subject, answers| {
            on_effect(subject, |op_key, seen| Request::Approve {
                op_key,
                seen,
                reason: answers.reason,
            })
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::Reject,
        keys: "D",
        bindings: &[key('D')],
        label: "reject",
        description: "reject a compensation awaiting approval",
        featured_in: &[View::Escalations],
        request: Some(|_, subject, answers| {
            on_effect(subject, |op_key, seen| Request::Reject {
                op_key,
                seen,
                reason: answers.reason,
            })
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::Acknowledge,
        keys: "K",
        bindings: &[key('K')],
        label: "acknowledge",
        description: "acknowledge an escalation",
        scope: Scope::Escalation,
        in_key_bar: true,
        request: Some(|_, subject, answers| {
            on_escalation(subject, |escalation_key| Request::Acknowledge {
                escalation_key,
                reason: answers.reason,
            })
        }),
        ..WRITES
    },
    ActionInfo {
        action: Action::CloseEscalation,
        keys: "Z",
        bindings: &[key('Z')],
        label: "close",
        description: "resolve an escalation (close the loop)",
        scope: Scope::Escalation,
        in_key_bar: true,
        request: Some(|_, subject, answers| {
            on_escalation(subject, |escalation_key| Request::ResolveEscalation {
                escalation_key,
                reason: answers.reason,
            })
        }),
        ..WRITES
    },
];

impl ActionInfo {
    /// Whether help and the key bar offer it in this view: escalation
    /// actions in the escalations view, the instant's keys in time travel.
    pub fn offered(&self, view: View, time_travel: bool) -> bool {
        match self.scope {
            Scope::Escalation => view == View::Escalations,
            Scope::History => time_travel,
            Scope::Everywhere | Scope::Effect | Scope::Pane => true,
        }
    }
}

impl Action {
    pub fn info(self) -> &'static ActionInfo {
        let lookup = match self {
            Action::GoToView(_) => Action::GoToView(View::Pane(Pane::Overdue)),
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

    /// Its name in the ledger's rules of which action applies to an effect
    /// (`ledger.refusals`): the SQL function's, without `op_`.
    pub fn ledger_action(self) -> Option<&'static str> {
        match self {
            Action::ResolveSucceeded | Action::ResolveFailed => Some("resolve"),
            Action::Compensate => Some("compensate"),
            Action::Operator(call) => Some(call.ledger_action()),
            _ => None,
        }
    }

    /// The one gate for read-only mode.
    pub fn allowed(self, read_only: bool) -> bool {
        !(read_only && self.writes())
    }

    /// The action a key runs: the digits pick a view, every other key is a
    /// binding of one row of [`TABLE`].
    pub fn from_key(key: KeyEvent) -> Option<Action> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if let KeyCode::Char(digit @ '1'..='7') = key.code
            && !ctrl
        {
            return super::view::VIEWS
                .get(digit as usize - '1' as usize)
                .copied()
                .map(Action::GoToView);
        }
        TABLE
            .iter()
            .find(|entry| {
                entry
                    .bindings
                    .iter()
                    .any(|binding| binding.code == key.code && binding.ctrl == ctrl)
            })
            .map(|entry| entry.action)
    }

    /// The settling request for what the dialog found and the operator typed.
    pub fn request(self, subject: Subject, answers: Answers) -> Option<Request> {
        (self.info().request?)(self, subject, answers)
    }

    /// The fields its dialog asks for, then the buttons.
    pub fn dialog_fields(self) -> Vec<DialogField> {
        let info = self.info();
        let mut fields = Vec::new();
        if info.asks_external_ref {
            fields.push(DialogField::ExternalRef);
        }
        if matches!(
            info.confirmation,
            Confirmation::Reason | Confirmation::ReasonAndKey
        ) {
            fields.push(DialogField::Reason);
        }
        if info.asks_retryable {
            fields.push(DialogField::Retryable);
        }
        if info.confirmation == Confirmation::ReasonAndKey {
            fields.push(DialogField::KeySuffix);
        }
        fields.push(DialogField::Buttons);
        fields
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
        assert!(!Action::Operator(&actions::ACKNOWLEDGE_DUPLICATES).allowed(true));
        assert!(Action::Open.allowed(true));
    }

    #[test]
    fn every_binding_runs_one_action_and_every_writing_action_makes_a_request() {
        for entry in TABLE {
            for binding in entry.bindings {
                let modifiers = if binding.ctrl {
                    KeyModifiers::CONTROL
                } else {
                    KeyModifiers::NONE
                };
                let pressed = KeyEvent::new(binding.code, modifiers);
                assert_eq!(
                    Action::from_key(pressed),
                    Some(entry.action),
                    "{:?}",
                    binding
                );
            }
            assert_eq!(entry.writes, entry.request.is_some(), "{:?}", entry.action);
        }
        let ack = Action::Operator(&actions::ACKNOWLEDGE_DUPLICATES);
        assert_eq!(
            ack.request(
                Subject::Effect {
                    op_key: "k".into(),
                    seen: 3
                },
                Answers {
                    reason: "seen".into(),
                    ..Answers::default()
                }
            ),
            Some(Request::Operator {
                call: &actions::ACKNOWLEDGE_DUPLICATES,
                op_key: "k".into(),
                seen: Some(3),
                reason: "seen".into()
            })
        );
        assert_eq!(
            ack.request(
                Subject::Escalation {
                    escalation_key: "e".into()
                },
                Answers::default()
            ),
            None
        );
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
