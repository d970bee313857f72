use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

use crate::console::action::Subject;
use crate::console::app::{Dialog, DialogField};
use crate::console::theme::{Role, Theme};
use crate::text::sanitize_line;

pub fn draw(frame: &mut Frame, area: Rect, dialog: &Dialog, theme: &Theme) {
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
    lines.extend(field_lines(dialog, theme));
    if let Some((note, role)) = &dialog.note {
        lines.push(Line::from(Span::styled(
            sanitize_line(note),
            theme.role(*role),
        )));
    }
    lines.push(Line::default());
    lines.push(button_line(dialog, theme));
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

/// The fields the action's row asks for, in their order: the provider's
/// reference, the reason, whether the key may be retried, whether to
/// cancel instead, and the end of the key.
fn field_lines(dialog: &Dialog, theme: &Theme) -> Vec<Line<'static>> {
    let fields = dialog.action.dialog_fields();
    let mut lines = Vec::new();
    if fields.contains(&DialogField::ExternalRef) {
        lines.push(input(
            theme,
            "provider reference",
            &dialog.external_ref,
            dialog.focus == DialogField::ExternalRef,
        ));
    }
    if fields.contains(&DialogField::Reason) {
        lines.push(input(
            theme,
            "reason (required)",
            &dialog.reason,
            dialog.focus == DialogField::Reason,
        ));
    }
    if fields.contains(&DialogField::Retryable) {
        let (mark, meaning) = if dialog.retryable {
            ("[x]", "yes: the same key may be dispatched again")
        } else {
            ("[ ]", "no: the key stays failed for good")
        };
        lines.push(choice(
            theme,
            "retryable (space)",
            format!("{mark} {meaning}"),
            dialog.focus == DialogField::Retryable,
        ));
    }
    if !dialog.stopped_asking.is_empty() {
        lines.push(choice(
            theme,
            "cancel instead (space)",
            cancel_instead(dialog),
            dialog.focus == DialogField::CancelInstead,
        ));
    }
    if let Some(required) = &dialog.required_suffix {
        lines.push(input(
            theme,
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
    lines
}

/// A label's style: the focused field's stands out.
fn label_style(theme: &Theme, focused: bool) -> Style {
    if focused {
        theme.role(Role::Accent)
    } else {
        theme.role(Role::Muted)
    }
}

/// A text field, with the cursor when it has the focus.
fn input(theme: &Theme, label: &str, value: &str, focused: bool) -> Line<'static> {
    let cursor = if focused { "▏" } else { "" };
    Line::from(vec![
        Span::styled(format!("{label:>22}: "), label_style(theme, focused)),
        Span::styled(
            format!("{}{cursor}", sanitize_line(value)),
            theme.base().add_modifier(Modifier::UNDERLINED),
        ),
    ])
}

/// A box space ticks, and what it means as it is.
fn choice(theme: &Theme, label: &str, meaning: String, focused: bool) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{label:>22}: "), label_style(theme, focused)),
        Span::styled(meaning, theme.base()),
    ])
}

/// What releasing held items whose agents stopped asking does instead,
/// when cancelling is chosen, and to how many.
fn cancel_instead(dialog: &Dialog) -> String {
    let stopped = dialog.stopped_asking.len();
    match (dialog.cancel_instead, &dialog.subject) {
        (false, Subject::Effect { .. }) => "[ ] no: release it".to_string(),
        (false, _) => "[ ] no: release them too".to_string(),
        (true, Subject::Pane { targets }) if targets.len() > stopped => format!(
            "[x] yes: cancel those {stopped}, release the other {}",
            targets.len() - stopped
        ),
        (true, Subject::Pane { .. }) => format!("[x] yes: cancel all {stopped}"),
        (true, _) => "[x] yes: cancel it".to_string(),
    }
}

/// Back and Confirm, the selected one lit, brighter when the buttons have
/// the focus.
fn button_line(dialog: &Dialog, theme: &Theme) -> Line<'static> {
    let on_buttons = dialog.focus == DialogField::Buttons;
    let button = |label: &str, selected: bool| {
        let style = if selected && on_buttons {
            theme.selection()
        } else if selected {
            theme.role(Role::Accent)
        } else {
            theme.role(Role::Muted)
        };
        Span::styled(format!("[ {label} ]"), style)
    };
    Line::from(vec![
        Span::raw("          "),
        // Not "Cancel": the dialog of "cancel a hold" would offer Cancel to back out.
        button("Back", !dialog.confirm_selected),
        Span::raw("   "),
        button("Confirm", dialog.confirm_selected),
    ])
}
