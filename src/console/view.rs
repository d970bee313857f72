//! The console's views: the four panes, escalations, audit and finance.

use crate::ledger::panes::Pane;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// Its place among the tabs (`VIEWS`), which is where its state is kept.
    pub const fn index(self) -> usize {
        match self {
            View::Pane(Pane::Overdue) => 0,
            View::Pane(Pane::Unknown) => 1,
            View::Pane(Pane::Duplicates) => 2,
            View::Pane(Pane::Held) => 3,
            View::Escalations => 4,
            View::Audit => 5,
            View::Finance => 6,
        }
    }

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

    /// The tab's name where the full ones do not fit.
    pub fn short_tab(self) -> &'static str {
        match self {
            View::Pane(Pane::Overdue) => "Over",
            View::Pane(Pane::Unknown) => "Unkn",
            View::Pane(Pane::Duplicates) => "Dup",
            View::Pane(Pane::Held) => "Held",
            View::Escalations => "Esc",
            View::Audit => "Aud",
            View::Finance => "Fin",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_view_is_kept_at_its_tab() {
        for (position, view) in VIEWS.iter().enumerate() {
            assert_eq!(view.index(), position, "{view:?}");
        }
    }
}
