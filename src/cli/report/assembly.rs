//! A post-mortem of a time range: what entered each pane, every
//! reconciliation and operator action, time to resolution per item, what
//! was still open at the end, and the timelines of the worst items. The
//! range is read in slices so a caller can show progress.

use crate::ledger::LedgerPool;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::ledger::LedgerError;
use crate::ledger::history::{self, TimelineEntry};
use crate::ledger::incident;
use crate::ledger::panes::escape_like;
use crate::ledger::panes::{self, Filter, Pane, PaneCount, PaneRows};

/// What to report on. Target and action match as the console's filter
/// does: case-insensitive substrings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportScope {
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub target: Option<String>,
    pub action: Option<String>,
}

impl ReportScope {
    /// The same scope as a pane filter, for the panes at the end.
    pub fn filter(&self) -> Filter {
        let mut terms = Vec::new();
        if let Some(target) = &self.target {
            terms.push((Some("target".to_string()), target.clone()));
        }
        if let Some(action) = &self.action {
            terms.push((Some("action".to_string()), action.clone()));
        }
        // A report accounts for every repeat, replays included.
        Filter {
            terms,
            scopes: vec![crate::ledger::panes::Scope::WithReplays],
        }
    }
}

pub use crate::ledger::incident::PaneEntry;

/// Per pane: how many entered, were resolved by the end, and how long that took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PaneSummary {
    pub pane: Pane,
    pub entered: usize,
    pub resolved: usize,
    pub open_at_end: usize,
    /// Over the resolved items; None when none was.
    pub median_ms: Option<i64>,
    pub worst_ms: Option<i64>,
    /// The longest-open item still open at the end, measured to the end.
    pub oldest_open_ms: Option<i64>,
}

pub use crate::ledger::incident::{OperatorAction, ReportReconciliation};

/// Each pane at the end of the range (up to [`OPEN_LIMIT`] rows, with the full count).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenAtEnd {
    pub pane: Pane,
    pub count: i64,
    pub rows: PaneRows,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineLine {
    pub at: DateTime<Utc>,
    pub kind: &'static str,
    pub text: String,
}

impl From<TimelineEntry> for TimelineLine {
    fn from(entry: TimelineEntry) -> Self {
        TimelineLine {
            at: entry.at,
            kind: entry.kind,
            text: entry.text,
        }
    }
}

/// One of the items that took longest, with the effect's whole timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorstItem {
    pub entry: PaneEntry,
    pub timeline: Vec<TimelineLine>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scope: ReportScope,
    pub generated_at: DateTime<Utc>,
    pub summary: Vec<PaneSummary>,
    pub entries: Vec<PaneEntry>,
    pub reconciliations: Vec<ReportReconciliation>,
    pub operator_actions: Vec<OperatorAction>,
    pub open_at_end: Vec<OpenAtEnd>,
    pub counts_at_end: Vec<PaneCount>,
    pub worst: Vec<WorstItem>,
}

/// How far reading has got, for a progress line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub read_until: DateTime<Utc>,
    /// 0.0 to 1.0 of the range.
    pub fraction: f64,
    pub entries: usize,
    pub reconciliations: usize,
    pub operator_actions: usize,
}

/// Items whose timelines a report carries.
pub const WORST_ITEMS: usize = 3;
/// Rows kept per pane of the end-of-range panes.
pub const OPEN_LIMIT: i64 = 500;
/// Slices the range is read in (at most; none shorter than an hour).
const SLICES: i32 = 50;

pub async fn build(
    pool: &LedgerPool,
    scope: &ReportScope,
    mut progress: impl FnMut(Progress),
) -> Result<Report, LedgerError> {
    if scope.until <= scope.since {
        return Err(LedgerError::Invalid(format!(
            "the report range is empty: --until ({}) must be after --since ({})",
            scope.until.to_rfc3339(),
            scope.since.to_rfc3339()
        )));
    }
    let generated_at = Utc::now();
    let target_like = scope
        .target
        .as_deref()
        .map(|t| format!("%{}%", escape_like(t)));
    let action_like = scope
        .action
        .as_deref()
        .map(|a| format!("%{}%", escape_like(a)));

    let mut entries = Vec::new();
    let mut reconciliations = Vec::new();
    let mut operator_actions = Vec::new();
    let span = scope.until - scope.since;
    let slice = (span / SLICES).max(Duration::hours(1));
    let mut start = scope.since;
    while start < scope.until {
        let end = (start + slice).min(scope.until);
        let span = incident::Span {
            start,
            end,
            target_like: target_like.as_deref(),
            action_like: action_like.as_deref(),
        };
        for row in incident::pane_entries(pool, span).await? {
            entries.push(row.as_of(scope.until));
        }
        reconciliations.extend(incident::reconciliations(pool, span).await?);
        operator_actions.extend(incident::operator_actions(pool, span).await?);
        start = end;
        progress(Progress {
            read_until: end,
            fraction: fraction(scope, end),
            entries: entries.len(),
            reconciliations: reconciliations.len(),
            operator_actions: operator_actions.len(),
        });
    }

    let filter = scope.filter();
    let mut open_at_end = Vec::new();
    for pane in Pane::ALL {
        let count = panes::count(pool, pane, Some(scope.until), &filter).await?;
        let rows = panes::fetch(pool, pane, Some(scope.until), &filter, OPEN_LIMIT, 0).await?;
        open_at_end.push(OpenAtEnd { pane, count, rows });
    }
    let counts_at_end = panes::counts(pool, Some(scope.until)).await?;

    let mut worst = Vec::new();
    for entry in worst_entries(&entries, WORST_ITEMS) {
        let history = history::load(pool, &entry.op_key).await?;
        worst.push(WorstItem {
            entry: entry.clone(),
            timeline: history::timeline(&history)
                .into_iter()
                .map(TimelineLine::from)
                .collect(),
        });
    }

    Ok(Report {
        scope: scope.clone(),
        generated_at,
        summary: summarize(&entries),
        entries,
        reconciliations,
        operator_actions,
        open_at_end,
        counts_at_end,
        worst,
    })
}

fn fraction(scope: &ReportScope, read_until: DateTime<Utc>) -> f64 {
    let total = (scope.until - scope.since).num_milliseconds().max(1) as f64;
    ((read_until - scope.since).num_milliseconds() as f64 / total).clamp(0.0, 1.0)
}

/// Per pane, in the panes' order.
pub fn summarize(entries: &[PaneEntry]) -> Vec<PaneSummary> {
    Pane::ALL
        .into_iter()
        .map(|pane| {
            let mine: Vec<&PaneEntry> = entries.iter().filter(|e| e.pane == pane).collect();
            let mut resolved: Vec<i64> = mine
                .iter()
                .filter(|e| !e.is_open())
                .map(|e| e.duration_ms)
                .collect();
            resolved.sort_unstable();
            PaneSummary {
                pane,
                entered: mine.len(),
                resolved: resolved.len(),
                open_at_end: mine.len() - resolved.len(),
                median_ms: median(&resolved),
                worst_ms: resolved.last().copied(),
                oldest_open_ms: mine
                    .iter()
                    .filter(|e| e.is_open())
                    .map(|e| e.duration_ms)
                    .max(),
            }
        })
        .collect()
}

/// The middle of sorted values; the mean of the two middle ones for an even count.
pub fn median(sorted: &[i64]) -> Option<i64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some(sorted[n / 2 - 1] + (sorted[n / 2] - sorted[n / 2 - 1]) / 2),
    }
}

/// The `n` items that took longest (open ones to the end of the range), one
/// per effect, longest first.
pub fn worst_entries(entries: &[PaneEntry], n: usize) -> Vec<&PaneEntry> {
    let mut sorted: Vec<&PaneEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| {
        b.duration_ms
            .cmp(&a.duration_ms)
            .then(a.entered_at.cmp(&b.entered_at))
            .then(a.effect_id.cmp(&b.effect_id))
    });
    let mut seen = Vec::new();
    sorted
        .into_iter()
        .filter(|entry| {
            if seen.contains(&entry.effect_id) {
                false
            } else {
                seen.push(entry.effect_id);
                true
            }
        })
        .take(n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[5]), Some(5));
        assert_eq!(median(&[1, 3, 10]), Some(3));
        assert_eq!(median(&[1, 3, 10, 20]), Some(6));
    }
}
