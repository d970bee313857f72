use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

use crate::console::action::Subject;
use crate::console::app::{Dialog, DialogField};
use crate::console::theme::{Role, Theme};
use crate::text::sanitize_line;

pub fn draw(frame: &mut Frame, area: Rect, dialog: &Dialog, theme: &Theme) {
    let fields = dialog.action.dialog_fields();
    let mut lines = vec![Line::from(Span::styled(
        sanitize_line(&dialog.summary),
        theme.base(),
    ))];
    if let Some(names) = &dialog.names {
        lines.push(Line::from(vec![
            Span::styled("keys: ", theme.role(Role::Muted)),
            Span::styled(sanitize_line(names), theme.base()),
        ]));
    }
    lines.push(Line::default());
    let input = |label: &str, value: &str, focused: bool| {
        let cursor = if focused { "▏" } else { "" };
        let style = if focused {
            theme.role(Role::Accent)
        } else {
            theme.role(Role::Muted)
        };
        Line::from(vec![
            Span::styled(format!("{label:>22}: "), style),
            Span::styled(
                format!("{}{cursor}", sanitize_line(value)),
                theme.base().add_modifier(Modifier::UNDERLINED),
            ),
        ])
    };
    if fields.contains(&DialogField::ExternalRef) {
        lines.push(input(
            "provider reference",
            &dialog.external_ref,
            dialog.focus == DialogField::ExternalRef,
        ));
    }
    if fields.contains(&DialogField::Reason) {
        lines.push(input(
            "reason (required)",
            &dialog.reason,
            dialog.focus == DialogField::Reason,
        ));
    }
    if fields.contains(&DialogField::Retryable) {
        let focused = dialog.focus == DialogField::Retryable;
        let (mark, meaning) = if dialog.retryable {
            ("[x]", "yes: the same key may be dispatched again")
        } else {
            ("[ ]", "no: the key stays failed for good")
        };
        let style = if focused {
            theme.role(Role::Accent)
        } else {
            theme.role(Role::Muted)
        };
        lines.push(Line::from(vec![
            Span::styled(format!("{:>22}: ", "retryable (space)"), style),
            Span::styled(format!("{mark} {meaning}"), theme.base()),
        ]));
    }
    if !dialog.stopped_asking.is_empty() {
        let focused = dialog.focus == DialogField::CancelInstead;
        let stopped = dialog.stopped_asking.len();
        let meaning = match (dialog.cancel_instead, &dialog.subject) {
            (false, Subject::Effect { .. }) => "[ ] no: release it".to_string(),
            (false, _) => "[ ] no: release them too".to_string(),
            (true, Subject::Pane { targets }) if targets.len() > stopped => format!(
                "[x] yes: cancel those {stopped}, release the other {}",
                targets.len() - stopped
            ),
            (true, Subject::Pane { .. }) => format!("[x] yes: cancel all {stopped}"),
            (true, _) => "[x] yes: cancel it".to_string(),
        };
        let style = if focused {
            theme.role(Role::Accent)
        } else {
            theme.role(Role::Muted)
        };
        lines.push(Line::from(vec![
            Span::styled(format!("{:>22}: ", "cancel instead (space)"), style),
            Span::styled(meaning, theme.base()),
        ]));
    }
    if let Some(required) = &dialog.required_suffix {
        lines.push(input(
            "type the end of the key",
            &dialog.key_suffix,
            dialog.focus == DialogField::KeySuffix,
        ));
        lines.push(Line::from(Span::styled(
            format!(
                "{:>24}this moves money: the key ends in \"{}\"",
                "",
                sanitize_line(required)
            ),
            theme.role(Role::Warn),
        )));
    }
    if let Some((note, role)) = &dialog.note {
        lines.push(Line::from(Span::styled(
            sanitize_line(note),
            theme.role(*role),
        )));
    }
    lines.push(Line::default());
    let button = |label: &str, selected: bool, focused: bool| {
        let style = if selected && focused {
            theme.selection()
        } else if selected {
            theme.role(Role::Accent)
        } else {
            theme.role(Role::Muted)
        };
        Span::styled(format!("[ {label} ]"), style)
    };
    let on_buttons = dialog.focus == DialogField::Buttons;
    lines.push(Line::from(vec![
        Span::raw("          "),
        // Not "Cancel": the dialog of "cancel a hold" would offer Cancel to back out.
        button("Back", !dialog.confirm_selected, on_buttons),
        Span::raw("   "),
        button("Confirm", dialog.confirm_selected, on_buttons),
    ]));
    if let Some(error) = &dialog.error {
        lines.push(Line::default());
        lines.push(Line::from(Span::styled(
            format!("✗ {}", sanitize_line(error)),
            theme.role(Role::Critical),
        )));
    }
    lines.push(Line::default());
    lines.push(Line::from(Span::styled(
        "Tab next field · ←→ choose · Enter · Esc cancels (nothing is written)",
        theme.role(Role::Muted),
    )));
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.role(Role::Warn))
        .title(Span::styled(
            format!(" {} ", dialog.title),
            theme.role(Role::Warn).add_modifier(Modifier::BOLD),
        ));
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .style(theme.base())
            .wrap(Wrap { trim: false }),
        area,
    );
}
