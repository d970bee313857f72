//! Everything an operator can do in the console, in one table: the keys
//! that run it, the help line, the key bar. A writing action is a verb of
//! the settling table ([`crate::settle::verbs`]), which says what its
//! dialog asks and the request the answers become; a row here adds only
//! its keys and where it shows. Key handling, help, the key bar and
//! read-only filtering are all read from it, and read-only is enforced in
//! one place: [`Action::allowed`].

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::view::View;
use crate::ledger::panes::Pane;
use crate::settle::Request;
use crate::settle::verbs::{self, Field, On, Verb};
pub use crate::settle::verbs::{Answers, Money, Outcome, Subject};

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
    /// A verb of the settling table, on the selection or every item of the pane.
    Verb(&'static Verb, Use),
}

/// How a console key uses its verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Use {
    /// On the selected effect or escalation.
    One,
    /// On every item of the (filtered) pane.
    EveryItem,
    /// Resolving, with this outcome: a key each.
    As(Outcome),
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
    /// Every escalation the (filtered) escalations view lists.
    Escalations,
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
    /// Of a release: cancel instead the held items whose agents stopped
    /// asking for them (released, they would go to Overdue undispatched).
    CancelInstead,
    KeySuffix,
    Buttons,
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

pub struct ActionInfo {
    pub action: Action,
    /// The keys as the help screen and the key bar show them.
    pub keys: &'static str,
    pub bindings: &'static [Binding],
    /// One or two words for the key bar.
    pub label: &'static str,
    pub description: &'static str,
    pub writes: bool,
    pub scope: Scope,
    /// Shown in the one-line key bar everywhere.
    pub in_key_bar: bool,
    /// Shown in the key bar in these views, where it is what matters most.
    pub featured_in: &'static [View],
}

/// A row that only moves, shows or polls: no dialog, no request.
const SHOWS: ActionInfo = ActionInfo {
    action: Action::Help,
    keys: "",
    bindings: &[],
    label: "",
    description: "",
    writes: false,
    scope: Scope::Everywhere,
    in_key_bar: false,
    featured_in: &[],
};

/// The row of a key that runs a verb: what it writes, where it applies
/// and its help line all come from the verb.
const fn runs(
    verb: &'static Verb,
    how: Use,
    keys: &'static str,
    bindings: &'static [Binding],
    label: &'static str,
) -> ActionInfo {
    let (scope, description) = match (how, &verb.every_item) {
        (Use::EveryItem, Some(every_item)) => match verb.on {
            On::Effect => (Scope::Pane, every_item.summary),
            On::Escalation => (Scope::Escalations, every_item.summary),
        },
        (Use::EveryItem, None) => {
            panic!("a key for every item of a pane runs a verb done to every item")
        }
        _ => match verb.on {
            On::Effect => (Scope::Effect, verb.summary),
            On::Escalation => (Scope::Escalation, verb.summary),
        },
    };
    ActionInfo {
        action: Action::Verb(verb, how),
        keys,
        bindings,
        label,
        description,
        writes: true,
        scope,
        ..SHOWS
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
        in_key_bar: true,
        ..runs(&verbs::RECONCILE, Use::One, "r", &[key('r')], "reconcile")
    },
    ActionInfo {
        featured_in: &[View::Pane(Pane::Duplicates)],
        ..runs(
            &verbs::ACKNOWLEDGE_DUPLICATES,
            Use::EveryItem,
            "C",
            &[key('C')],
            "acknowledge all",
        )
    },
    ActionInfo {
        featured_in: &[View::Pane(Pane::Held)],
        ..runs(
            &verbs::RELEASE,
            Use::EveryItem,
            "L",
            &[key('L')],
            "release all",
        )
    },
    ActionInfo {
        // The overdue pane's items never sent are cancelled too.
        featured_in: &[View::Pane(Pane::Held), View::Pane(Pane::Overdue)],
        ..runs(
            &verbs::CANCEL,
            Use::EveryItem,
            "X",
            &[key('X')],
            "cancel all",
        )
    },
    runs(
        &verbs::RECONCILE,
        Use::EveryItem,
        "R",
        &[key('R')],
        "reconcile all",
    ),
    ActionInfo {
        in_key_bar: true,
        ..runs(&verbs::COMPENSATE, Use::One, "c", &[key('c')], "compensate")
    },
    ActionInfo {
        featured_in: &[View::Finance],
        ..runs(
            &verbs::REVERSE_DUPLICATE,
            Use::One,
            "u",
            &[key('u')],
            "reverse dup",
        )
    },
    runs(
        &verbs::SEND_COMPENSATION,
        Use::One,
        "B",
        &[key('B')],
        "send comp",
    ),
    ActionInfo {
        in_key_bar: true,
        ..runs(&verbs::ESCALATE, Use::One, "e", &[key('e')], "escalate")
    },
    runs(
        &verbs::ESCALATE,
        Use::EveryItem,
        "E",
        &[key('E')],
        "escalate all",
    ),
    ActionInfo {
        description: "resolve as succeeded, with the provider's reference",
        featured_in: &[View::Pane(Pane::Overdue)],
        ..runs(
            &verbs::RESOLVE,
            Use::As(Outcome::Succeeded),
            "o",
            &[key('o')],
            "resolve ✓",
        )
    },
    ActionInfo {
        description: "resolve by hand as failed",
        featured_in: &[View::Pane(Pane::Overdue)],
        ..runs(
            &verbs::RESOLVE,
            Use::As(Outcome::Failed),
            "f",
            &[key('f')],
            "resolve ✗",
        )
    },
    ActionInfo {
        featured_in: &[View::Pane(Pane::Held)],
        ..runs(&verbs::RELEASE, Use::One, "l", &[key('l')], "release")
    },
    ActionInfo {
        featured_in: &[View::Pane(Pane::Held)],
        ..runs(&verbs::CANCEL, Use::One, "x", &[key('x')], "cancel")
    },
    runs(&verbs::ANNOTATE, Use::One, "a", &[key('a')], "annotate"),
    ActionInfo {
        featured_in: &[View::Pane(Pane::Duplicates)],
        ..runs(
            &verbs::ACKNOWLEDGE_DUPLICATES,
            Use::One,
            "d",
            &[key('d')],
            "acknowledge",
        )
    },
    runs(
        &verbs::REOPEN_DUPLICATES,
        Use::One,
        "U",
        &[key('U')],
        "reopen repeats",
    ),
    ActionInfo {
        featured_in: &[View::Escalations],
        ..runs(&verbs::APPROVE, Use::One, "A", &[key('A')], "approve")
    },
    ActionInfo {
        featured_in: &[View::Escalations],
        ..runs(&verbs::REJECT, Use::One, "D", &[key('D')], "reject")
    },
    ActionInfo {
        in_key_bar: true,
        ..runs(
            &verbs::ACKNOWLEDGE_ESCALATION,
            Use::One,
            "K",
            &[key('K')],
            "acknowledge",
        )
    },
    ActionInfo {
        in_key_bar: true,
        ..runs(
            &verbs::RESOLVE_ESCALATION,
            Use::One,
            "Z",
            &[key('Z')],
            "resolve",
        )
    },
    ActionInfo {
        featured_in: &[View::Escalations],
        ..runs(
            &verbs::ACKNOWLEDGE_ESCALATION,
            Use::EveryItem,
            "C-k",
            &[ctrl('k')],
            "acknowledge all",
        )
    },
    ActionInfo {
        featured_in: &[View::Escalations],
        ..runs(
            &verbs::RESOLVE_ESCALATION,
            Use::EveryItem,
            "C-w",
            &[ctrl('w')],
            "resolve all",
        )
    },
];

impl ActionInfo {
    /// Whether help and the key bar offer it in this view: escalation
    /// actions in the escalations view, the instant's keys in time travel.
    pub fn offered(&self, view: View, time_travel: bool) -> bool {
        match self.scope {
            Scope::Escalation | Scope::Escalations => view == View::Escalations,
            Scope::History => time_travel,
            Scope::Everywhere | Scope::Effect | Scope::Pane => true,
        }
    }

    /// The views whose key bar shows it; None when only the help lists it.
    fn key_bar_views(&self) -> Option<String> {
        if self.in_key_bar {
            return Some(match self.scope {
                Scope::Escalation | Scope::Escalations => View::Escalations.tab().to_string(),
                Scope::History => "every view, under `--at`".to_string(),
                Scope::Everywhere | Scope::Effect | Scope::Pane => "every view".to_string(),
            });
        }
        let mut views: Vec<View> = self.featured_in.to_vec();
        views.sort_by_key(|view| view.index());
        (!views.is_empty()).then(|| {
            views
                .iter()
                .map(|view| view.tab())
                .collect::<Vec<_>>()
                .join(", ")
        })
    }
}

impl Scope {
    /// What an action of this scope acts on, in words.
    fn said(self) -> &'static str {
        match self {
            Scope::Everywhere => "any view",
            Scope::Effect => "the selected effect",
            Scope::Pane => "every item of the (filtered) pane",
            Scope::Escalation => "the selected escalation",
            Scope::Escalations => "every escalation of the (filtered) view",
            Scope::History => "the instant shown (`--at`)",
        }
    }
}

/// The console's keys as a Markdown table, one row per row of [`TABLE`]
/// in its order: the same keys and descriptions as the help (`?`), what
/// each acts on, whether it writes (✎), and its key-bar label with the
/// views whose key bar shows it (— for a key only the help lists).
/// `docs/keys.md` holds it between its markers, and a test keeps the two
/// equal.
pub fn keys_markdown() -> String {
    let cell = |text: &str| text.replace('|', "\\|");
    let mut table =
        String::from("| key | what it does | on | ✎ | in the key bar |\n|---|---|---|---|---|\n");
    for entry in TABLE {
        let key_bar = entry.key_bar_views().map_or_else(
            || "—".to_string(),
            |views| format!("{} ({views})", cell(entry.label)),
        );
        table.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            entry.keys,
            cell(entry.description),
            entry.scope.said(),
            if entry.writes { "✎" } else { "" },
            key_bar,
        ));
    }
    table
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
    /// (`ledger.refusals`): its verb's, when it acts on the selection. A
    /// verb done to every item of a pane is not ruled by the one selected:
    /// each item it does not apply to is skipped and counted.
    pub fn ledger_action(self) -> Option<&'static str> {
        match self {
            Action::Verb(verb, Use::One | Use::As(_)) => verb.rule(),
            _ => None,
        }
    }

    /// Whether confirming it moves money, so the dialog asks for the key's end.
    pub fn money(self) -> Money {
        match self {
            Action::Verb(verb, _) => verb.money,
            _ => Money::Never,
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
        let Action::Verb(verb, how) = self else {
            return None;
        };
        let answers = match how {
            Use::As(outcome) => Answers {
                outcome: Some(outcome),
                ..answers
            },
            Use::One | Use::EveryItem => answers,
        };
        verb.request(subject, answers)
    }

    /// The fields its dialog asks for, then the buttons; the dialog adds
    /// the key's end when confirming moves money.
    pub fn dialog_fields(self) -> Vec<DialogField> {
        let mut fields = Vec::new();
        if let Action::Verb(verb, how) = self {
            if verb.asks(Field::Reference) || how == Use::As(Outcome::Succeeded) {
                fields.push(DialogField::ExternalRef);
            }
            if verb.asks(Field::Reason) {
                fields.push(DialogField::Reason);
            }
            if how == Use::As(Outcome::Failed) {
                fields.push(DialogField::Retryable);
            }
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
        assert!(!Action::Verb(&verbs::COMPENSATE, Use::One).allowed(true));
        assert!(!Action::Verb(&verbs::ACKNOWLEDGE_DUPLICATES, Use::EveryItem).allowed(true));
        assert!(Action::Open.allowed(true));
    }

    #[test]
    fn every_binding_runs_one_action_and_every_writing_action_is_a_verb() {
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
            assert_eq!(
                entry.writes,
                matches!(entry.action, Action::Verb(..)),
                "{:?}",
                entry.action
            );
        }
        let ack = Action::Verb(&verbs::ACKNOWLEDGE_DUPLICATES, Use::One);
        assert_eq!(
            ack.request(
                Subject::Effect {
                    op_key: "k".into(),
                    seen: Some(3)
                },
                Answers {
                    reason: "seen".into(),
                    ..Answers::default()
                }
            ),
            Some(Request::on_effect(
                &verbs::ACKNOWLEDGE_DUPLICATES,
                "k",
                Some(3),
                Answers::because("seen")
            ))
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
    fn only_a_verb_on_the_selection_is_ruled_by_the_selection() {
        let release = |how| Action::Verb(&verbs::RELEASE, how).ledger_action();
        assert_eq!(release(Use::One), Some("release"));
        assert_eq!(release(Use::EveryItem), None);
        assert_eq!(
            Action::Verb(&verbs::RESOLVE, Use::As(Outcome::Failed)).ledger_action(),
            Some("resolve")
        );
    }

    #[test]
    fn a_resolving_key_gives_its_outcome_and_asks_what_it_needs() {
        let succeeded = Action::Verb(&verbs::RESOLVE, Use::As(Outcome::Succeeded));
        assert_eq!(
            succeeded.dialog_fields(),
            [
                DialogField::ExternalRef,
                DialogField::Reason,
                DialogField::Buttons
            ]
        );
        let failed = Action::Verb(&verbs::RESOLVE, Use::As(Outcome::Failed));
        assert_eq!(
            failed.dialog_fields(),
            [
                DialogField::Reason,
                DialogField::Retryable,
                DialogField::Buttons
            ]
        );
        let request = failed.request(
            Subject::Effect {
                op_key: "k".into(),
                seen: Some(1),
            },
            Answers {
                reason: "declined".into(),
                retryable: true,
                ..Answers::default()
            },
        );
        let request = request.expect("a failed outcome fits resolve");
        assert_eq!(*request.verb, verbs::RESOLVE);
        assert_eq!(
            (request.answers.outcome, request.answers.retryable),
            (Some(Outcome::Failed), true)
        );
    }

    #[test]
    fn money_moving_actions_ask_for_a_reason() {
        for entry in TABLE
            .iter()
            .filter(|entry| entry.action.money() != Money::Never)
        {
            assert!(
                entry.action.dialog_fields().contains(&DialogField::Reason),
                "{:?} moves money without a reason",
                entry.action
            );
        }
        assert_eq!(
            Action::Verb(&verbs::COMPENSATE, Use::One).money(),
            Money::Always
        );
    }
}
