use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::table;
use crate::console::app::App;
use crate::console::theme::{Role, Theme};
use crate::format::money;
use crate::text::sanitize_line;

/// Exposure per currency above, suspected double effects below: what a
/// finance reviewer checks, with a selection the settling keys act on.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let exposure = app
        .snapshot
        .as_ref()
        .and_then(|s| s.finance.as_ref())
        .map(|f| f.exposure.clone())
        .unwrap_or_default();
    // The rows, their header, the title and the legend.
    let height = (exposure.len() as u16 + 4).min(area.height / 2).max(3);
    let [top, bottom] =
        Layout::vertical([Constraint::Length(height), Constraint::Min(3)]).areas(area);
    // Read less often than the panes: say when. Under time travel the
    // review is of the instant, whenever it was read.
    let reviewed = match app.at {
        Some(at) => format!(", as of {} UTC", at.format("%Y-%m-%d %H:%M:%S")),
        None => app
            .snapshot
            .as_ref()
            .and_then(|s| s.finance.as_ref())
            .map(|f| format!(", reviewed {} UTC", f.read_at.format("%H:%M:%S")))
            .unwrap_or_default(),
    };
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(theme.border())
        .title(Span::styled(
            format!(
                " Exposure per currency (last 30 days{reviewed}; never summed across currencies) "
            ),
            theme.role(Role::Accent).add_modifier(Modifier::BOLD),
        ));
    // Four figures a row, as wide as the terminal allows: at 80 columns
    // the awaiting-approval figure and the risk flag still fit.
    let figure = ((area.width as usize).saturating_sub(12) / 4).clamp(17, 26);
    let mut lines = vec![Line::from(Span::styled(
        format!(
            "  {:<5} {:>figure$} {:>figure$} {:>figure$} {:>figure$}",
            "cur",
            "unknown",
            if figure >= 18 {
                "suspected excess"
            } else {
                "excess"
            },
            "compensated",
            if figure >= 18 {
                "awaiting approval"
            } else {
                "to approve"
            }
        ),
        theme.role(Role::Muted).add_modifier(Modifier::BOLD),
    ))];
    let failed = app
        .snapshot
        .as_ref()
        .and_then(|s| s.finance_error.as_deref());
    if let Some(error) = failed {
        // The header would promise a table that is not there.
        lines = vec![Line::from(Span::styled(
            format!("  ✗ the finance review failed: {}", sanitize_line(error)),
            theme.role(Role::Critical),
        ))];
    } else if exposure.is_empty() {
        let text = if app.snapshot.as_ref().is_some_and(|s| s.finance.is_some()) {
            "  ✓ no money at risk"
        } else {
            "  reading the finance review…"
        };
        lines.push(Line::from(Span::styled(text, theme.role(Role::Muted))));
    }
    for row in &exposure {
        let cur = sanitize_line(&row.currency);
        let cell = |count: i64, minor: i64| format!("{count} · {}", money(minor, &cur));
        let risky = row.unknown_minor > 0 || row.suspected_excess_minor > 0;
        lines.push(Line::from(vec![
            Span::styled(format!("  {cur:<5} "), theme.role(Role::Accent)),
            Span::styled(
                format!("{:>figure$} ", cell(row.unknown_effects, row.unknown_minor)),
                theme.role(if row.unknown_minor > 0 {
                    Role::Warn
                } else {
                    Role::Text
                }),
            ),
            Span::styled(
                format!(
                    "{:>figure$} ",
                    cell(row.suspected_effects, row.suspected_excess_minor)
                ),
                theme.role(if row.suspected_excess_minor > 0 {
                    Role::Critical
                } else {
                    Role::Text
                }),
            ),
            Span::styled(
                format!(
                    "{:>figure$} ",
                    cell(row.compensated_effects, row.compensated_minor)
                ),
                theme.role(Role::Ok),
            ),
            Span::styled(
                format!(
                    "{:>figure$}",
                    cell(row.awaiting_approval, row.awaiting_approval_minor)
                ),
                theme.base(),
            ),
            Span::styled(if risky { " ⚑" } else { "" }, theme.role(Role::Critical)),
        ]));
    }
    lines.push(Line::from(Span::styled(
        "  ⚑ money at risk · approved: allowed by the approvals on record · \
         excess: paid beyond that (or beyond the first payment)",
        theme.role(Role::Muted),
    )));
    frame.render_widget(Paragraph::new(lines).block(block).style(theme.base()), top);
    table::draw_titled(
        frame,
        bottom,
        app,
        theme,
        "Suspected double effects · c compensates · e escalates",
    );
}
