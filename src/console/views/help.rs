use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use crate::console::action::{Scope, TABLE};
use crate::console::app::{App, View};
use crate::console::theme::{Role, Theme};

/// Generated from the action table: the keys of the active view, and why
/// the writing ones are missing when the console is read-only.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let mut lines = Vec::new();
    let in_escalations = app.current_view() == View::Escalations;
    for entry in TABLE {
        if entry.scope == Scope::Escalation && !in_escalations {
            continue;
        }
        let allowed = entry.action.allowed(app.read_only);
        let style = if allowed {
            theme.base()
        } else {
            theme.role(Role::Muted).add_modifier(Modifier::CROSSED_OUT)
        };
        let marker = if entry.writes { "✎" } else { " " };
        lines.push(Line::from(vec![
            Span::styled(
                format!(" {:>7} ", entry.keys),
                theme.role(Role::Accent).add_modifier(Modifier::BOLD),
            ),
            Span::styled(format!("{marker} "), theme.role(Role::Warn)),
            Span::styled(entry.description, style),
        ]));
    }
    lines.push(Line::default());
    let footer = if app.read_only {
        " ✎ writes to the ledger — disabled: this console is READ-ONLY"
    } else {
        " ✎ writes to the ledger, after a confirmation whose default is Cancel"
    };
    lines.push(Line::from(Span::styled(footer, theme.role(Role::Muted))));
    lines.push(Line::from(Span::styled(
        " any key closes this help",
        theme.role(Role::Muted),
    )));
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.role(Role::Accent))
        .title(format!(" Keys — {} ", app.current_view().title()));
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines).block(block).style(theme.base()), area);
}
