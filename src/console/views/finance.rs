use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::table;
use crate::console::app::Shown;
use crate::console::theme::{Role, Theme};
use crate::format::money;
use crate::ledger::finance::Exposure;
use crate::text::sanitize_line;

/// Exposure per currency above, suspected double effects below: what a
/// finance reviewer checks, with a selection the settling keys act on.
pub fn draw(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme) {
    let review = app.snapshot().and_then(|s| s.finance.as_ref());
    let exposure = review.map(|f| f.exposure.clone()).unwrap_or_default();
    // The rows, their header, the title and the legend.
    let height = (exposure.len() as u16 + 4).min(area.height / 2).max(3);
    let [top, bottom] =
        Layout::vertical([Constraint::Length(height), Constraint::Min(3)]).areas(area);
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(theme.border())
        .title(Span::styled(
            format!(
                " Exposure per currency (last 30 days{}; never summed across currencies) ",
                reviewed(app)
            ),
            theme.role(Role::Accent).add_modifier(Modifier::BOLD),
        ));
    let lines = exposure_lines(app, &exposure, area.width as usize, theme);
    frame.render_widget(Paragraph::new(lines).block(block).style(theme.base()), top);
    table::draw_titled(
        frame,
        bottom,
        app,
        theme,
        "Suspected double effects · c compensates · e escalates",
    );
}

/// Read less often than the panes: say when. Under time travel the
/// review is of the instant, whenever it was read.
fn reviewed(app: &dyn Shown) -> String {
    match app.at() {
        Some(at) => format!(", as of {} UTC", at.format("%Y-%m-%d %H:%M:%S")),
        None => app
            .snapshot()
            .and_then(|s| s.finance.as_ref())
            .map(|f| format!(", reviewed {} UTC", f.read_at.format("%H:%M:%S")))
            .unwrap_or_default(),
    }
}

/// Each currency's figures, as text and how loud.
fn figure_cells(exposure: &[Exposure]) -> Vec<[(String, Role); 4]> {
    exposure
        .iter()
        .map(|row| {
            let cur = sanitize_line(&row.currency);
            let cell = |count: i64, minor: i64| format!("{count} · {}", money(minor, &cur));
            let loud = |minor: i64, role: Role| if minor > 0 { role } else { Role::Text };
            [
                (
                    cell(row.unknown_effects, row.unknown_minor),
                    loud(row.unknown_minor, Role::Warn),
                ),
                (
                    cell(row.suspected_effects, row.suspected_excess_minor),
                    loud(row.suspected_excess_minor, Role::Critical),
                ),
                (
                    cell(row.compensated_effects, row.compensated_minor),
                    Role::Ok,
                ),
                (
                    cell(row.awaiting_approval, row.awaiting_approval_minor),
                    Role::Text,
                ),
            ]
        })
        .collect()
}

/// The exposure table in `width` columns: its header and a row per
/// currency (else why there are none), then the legend.
fn exposure_lines(
    app: &dyn Shown,
    exposure: &[Exposure],
    width: usize,
    theme: &Theme,
) -> Vec<Line<'static>> {
    let rows = figure_cells(exposure);
    let layout = Figures::fit(&rows, width);
    let mut header = format!("  {:<5}", "cur");
    for &figure in &layout.shown {
        let title = if layout.width >= FIGURES[figure].0.len() {
            FIGURES[figure].0
        } else {
            FIGURES[figure].1
        };
        header.push_str(&format!(" {title:>width$}", width = layout.width));
    }
    let mut lines = vec![Line::from(Span::styled(
        header,
        theme.role(Role::Muted).add_modifier(Modifier::BOLD),
    ))];
    let failed = app.snapshot().and_then(|s| s.finance_error.as_deref());
    if let Some(error) = failed {
        // The header would promise a table that is not there.
        lines = vec![Line::from(Span::styled(
            format!("  ✗ the finance review failed: {}", sanitize_line(error)),
            theme.role(Role::Critical),
        ))];
    } else if exposure.is_empty() {
        let text = if app.snapshot().is_some_and(|s| s.finance.is_some()) {
            "  ✓ no money at risk"
        } else {
            "  reading the finance review…"
        };
        lines.push(Line::from(Span::styled(text, theme.role(Role::Muted))));
    }
    for (row, cells) in exposure.iter().zip(&rows) {
        let cur = sanitize_line(&row.currency);
        let risky = row.unknown_minor > 0 || row.suspected_excess_minor > 0;
        let mut spans = vec![Span::styled(
            format!("  {cur:<5}"),
            theme.role(Role::Accent),
        )];
        for &figure in &layout.shown {
            let (text, role) = &cells[figure];
            spans.push(Span::styled(
                format!(" {text:>width$}", width = layout.width),
                theme.role(*role),
            ));
        }
        spans.push(Span::styled(
            if risky { " ⚑" } else { "" },
            theme.role(Role::Critical),
        ));
        lines.push(Line::from(spans));
    }
    lines.push(Line::from(Span::styled(
        "  ⚑ money at risk · approved: allowed by the approvals on record · \
         excess: paid beyond that (or beyond the first payment)",
        theme.role(Role::Muted),
    )));
    lines
}

/// The exposure's figures: the title when there is room, the short one
/// when not, and whether it is context (what was already reversed) that
/// goes first when the figures do not fit side by side.
const FIGURES: [(&str, &str, bool); 4] = [
    ("unknown", "unknown", false),
    ("suspected excess", "excess", false),
    ("compensated", "compensated", true),
    ("awaiting approval", "to approve", false),
];

/// Which figures a row shows, and how wide each is.
struct Figures {
    shown: Vec<usize>,
    width: usize,
}

impl Figures {
    /// Every figure as wide as its widest value and short title, so no two
    /// run together and the flag (` ⚑`) ends the row; the context figure
    /// goes when they do not fit; the rest shares what is left, up to 26.
    fn fit(rows: &[[(String, Role); 4]], total: usize) -> Figures {
        // `  EUR  ` before the figures, ` ⚑` after them.
        const AROUND: usize = 7 + 2;
        let widest = |figure: usize| {
            rows.iter()
                .map(|row| row[figure].0.chars().count())
                .chain([FIGURES[figure].1.len()])
                .max()
                .unwrap_or(0)
        };
        let mut shown: Vec<usize> = (0..FIGURES.len()).collect();
        let needed = |shown: &[usize]| shown.iter().map(|&f| widest(f)).max().unwrap_or(0);
        let line = |shown: &[usize], width: usize| AROUND + shown.len() * (width + 1);
        if line(&shown, needed(&shown)) > total {
            shown.retain(|&figure| !FIGURES[figure].2);
        }
        let least = needed(&shown);
        let width = (total.saturating_sub(AROUND) / shown.len().max(1))
            .saturating_sub(1)
            .clamp(least, 26.max(least));
        Figures { shown, width }
    }
}
