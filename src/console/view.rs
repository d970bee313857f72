//! The console's views: the four panes, escalations, audit and finance.

use crate::ledger::panes::Pane;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Pane(Pane),
    Escalations,
    Audit,
    Finance,
}

pub const VIEW_COUNT: usize = 7;

pub const VIEWS: [View; VIEW_COUNT] = [
    View::Pane(Pane::Overdue),
    View::Pane(Pane::Unknown),
    View::Pane(Pane::Duplicates),
    View::Pane(Pane::Held),
    View::Escalations,
    View::Audit,
    View::Finance,
];

impl View {
    /// The tab label: short enough for seven tabs on one line.
    pub fn tab(self) -> &'static str {
        match self {
            View::Pane(Pane::Overdue) => "Overdue",
            View::Pane(Pane::Unknown) => "Unknown",
            View::Pane(Pane::Duplicates) => "Duplicates",
            View::Pane(Pane::Held) => "Held",
            View::Escalations => "Escalations",
            View::Audit => "Audit",
            View::Finance => "Finance",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            View::Pane(pane) => pane.title(),
            View::Escalations => "Escalations",
            View::Audit => "Audit log",
            View::Finance => "Finance",
        }
    }
}
