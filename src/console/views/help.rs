use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use crate::console::action::TABLE;
use crate::console::app::{HelpRoom, Shown};
use crate::console::theme::{Role, Theme};

/// Generated from the action table: the keys of the active view, and why
/// the writing ones are missing when the console is read-only. Sized from
/// its content: in one column, or two side by side when one is too tall
/// and two fit; else one column that scrolls (↑↓ j k PgUp PgDn Home End),
/// its footer saying what is above and below. A description too long for
/// the box wraps under itself. What it could show is returned, for the
/// keys that scroll it ([`crate::console::app::App::help_laid_out`]).
pub fn draw(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme) -> HelpRoom {
    let entries = key_lines(app, theme);
    let note = if app.is_read_only() {
        " ✎ writes to the ledger — disabled: this console is READ-ONLY"
    } else {
        " ✎ writes to the ledger, after a confirmation whose default is Back"
    };
    let inner_width = (area.width as usize).saturating_sub(2);
    let rows = (area.height as usize).saturating_sub(2 + FOOTER);
    let columns = key_columns(&entries, inner_width, rows);
    let per_column = columns.iter().map(Vec::len).max().unwrap_or(0);
    let shown = per_column.min(rows);
    let last_first = per_column - shown;
    let first = app.help_scroll().min(last_first);
    let (position, keys) = scroll_footer(first, last_first);
    let footer_lines = vec![
        Line::from(Span::styled(position, theme.role(Role::Accent))),
        Line::from(Span::styled(note, theme.role(Role::Muted))),
        Line::from(Span::styled(keys, theme.role(Role::Muted))),
    ];
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.role(Role::Accent))
        .title(format!(" Keys — {} ", app.current_view().title()));
    let column_width = columns.iter().flatten().map(Line::width).max().unwrap_or(0);
    let box_width = footer_lines
        .iter()
        .map(Line::width)
        .chain([column_width * columns.len() + 2 * (columns.len() - 1)])
        .max()
        .unwrap_or(0)
        .min(inner_width);
    let width = (box_width + 2) as u16;
    let height = (shown + FOOTER + 2) as u16;
    let rect = super::centered(area, width, height);
    frame.render_widget(Clear, rect);
    let inner = block.inner(rect);
    frame.render_widget(block.style(theme.base()), rect);
    let [keys_area, footer_area] =
        Layout::vertical([Constraint::Min(1), Constraint::Length(FOOTER as u16)]).areas(inner);
    let column_areas =
        Layout::horizontal(vec![Constraint::Length(column_width as u16); columns.len()])
            .spacing(2)
            .split(keys_area);
    for (lines, column) in columns.into_iter().zip(column_areas.iter()) {
        let visible: Vec<Line> = lines.into_iter().skip(first).take(shown).collect();
        frame.render_widget(Paragraph::new(visible).style(theme.base()), *column);
    }
    frame.render_widget(
        Paragraph::new(footer_lines).style(theme.base()),
        footer_area,
    );
    HelpRoom {
        last_first,
        page: shown.saturating_sub(1).max(1),
    }
}

/// What is above and below, the note, and what the keys do here.
const FOOTER: usize = 3;

/// One line per key the active view offers; the writing ones are struck
/// through when the console is read-only.
fn key_lines(app: &dyn Shown, theme: &Theme) -> Vec<Line<'static>> {
    let mut entries = Vec::new();
    for entry in TABLE {
        if !entry.offered(app.current_view(), app.at().is_some()) {
            continue;
        }
        let allowed = entry.action.allowed(app.is_read_only());
        let style = if allowed {
            theme.base()
        } else {
            theme.role(Role::Muted).add_modifier(Modifier::CROSSED_OUT)
        };
        let marker = if entry.writes { "✎" } else { " " };
        entries.push(Line::from(vec![
            Span::styled(
                format!(" {:>7} ", entry.keys),
                theme.role(Role::Accent).add_modifier(Modifier::BOLD),
            ),
            Span::styled(format!("{marker} "), theme.role(Role::Warn)),
            Span::styled(entry.description, style),
        ]));
    }
    entries
}

/// One column when it fits in `rows`; else two side by side when they
/// fit; else one that scrolls. An entry's wrapped lines stay together.
fn key_columns(
    entries: &[Line<'static>],
    inner_width: usize,
    rows: usize,
) -> Vec<Vec<Line<'static>>> {
    let wrapped = |width: usize| -> Vec<Vec<Line<'static>>> {
        entries
            .iter()
            .map(|entry| super::hanging(entry.clone(), width))
            .collect()
    };
    let one = wrapped(inner_width);
    let one_lines: usize = one.iter().map(Vec::len).sum();
    let half = inner_width.saturating_sub(2) / 2;
    let two = wrapped(half);
    let two_lines: usize = two.iter().map(Vec::len).sum();
    let mut split = 0;
    let mut left = 0;
    while split < two.len() && left < two_lines.div_ceil(2) {
        left += two[split].len();
        split += 1;
    }
    let two_fit = left.max(two_lines - left) <= rows;
    if one_lines > rows && two_fit {
        vec![two[..split].concat(), two[split..].concat()]
    } else {
        vec![one.concat()]
    }
}

/// Scrolling, the footer's first line says what is above and below, its
/// last which keys scroll.
fn scroll_footer(first: usize, last_first: usize) -> (String, &'static str) {
    match (first, last_first - first) {
        (0, 0) => (String::new(), " any key closes this help"),
        (above, below) => {
            let mut said = Vec::new();
            if above > 0 {
                said.push(format!("▲ {above} more above"));
            }
            if below > 0 {
                said.push(format!("▼ {below} more below"));
            }
            (
                format!(" {}", said.join(" · ")),
                " ↑↓ j k PgUp PgDn Home End scroll · any other key closes this help",
            )
        }
    }
}

/// What this console is connected to and as whom, and what the runtime
/// added (the demo: how a second operator joins). Values are wrapped, never
/// cut: a command line is only useful whole.
pub fn draw_about(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme) {
    // As wide as the terminal allows: a command is read whole.
    let width = area.width.saturating_sub(2).clamp(20, 100);
    let mut about = app.about().to_vec();
    if let Some(verdict) = app.snapshot().and_then(|s| s.durability.as_ref()) {
        about.push(("durability".to_string(), verdict.said()));
    }
    let label_width = about
        .iter()
        .map(|(label, _)| label.chars().count())
        .max()
        .unwrap_or(0)
        .min(24);
    let mut lines = Vec::new();
    for (label, value) in &about {
        let value = Span::styled(crate::text::sanitize_line(value), theme.base());
        let label = Span::styled(
            format!(" {label:>label_width$}  "),
            theme.role(Role::Accent),
        );
        // A command is copied from here: a path or a URL too long for the
        // room beside its label starts under the label, where it fits whole.
        let room = (width as usize).saturating_sub(label.width());
        let longest = value
            .content
            .split(' ')
            .map(|word| word.chars().count())
            .max()
            .unwrap_or(0);
        if longest > room {
            lines.push(Line::from(label));
            lines.extend(super::hanging(
                Line::from(vec![Span::raw("  "), value]),
                width as usize,
            ));
        } else {
            lines.extend(super::hanging(
                Line::from(vec![label, value]),
                width as usize,
            ));
        }
    }
    draw_popup(frame, area, width, " About this console ", lines, theme);
}

/// The session's messages, newest first, each whole: its time, what it
/// was about, and its text wrapped to the box.
pub fn draw_messages(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme) {
    let width = area.width.saturating_sub(4).clamp(20, 120);
    let room = (width as usize).saturating_sub(4).max(10);
    let mut lines = Vec::new();
    if app.messages().is_empty() {
        lines.push(Line::from(Span::styled(
            " no results or refusals yet this session",
            theme.role(Role::Muted),
        )));
    }
    for message in app.messages().iter().rev() {
        let about = message
            .about
            .as_deref()
            .map(|about| format!("  {}", crate::text::sanitize_line(about)))
            .unwrap_or_default();
        lines.push(Line::from(Span::styled(
            format!(" {}{about}", message.at.format("%H:%M:%S")),
            theme.role(Role::Accent),
        )));
        let line = Line::from(vec![
            Span::raw("   "),
            Span::styled(
                crate::text::sanitize_line(&message.text),
                theme.role(message.role),
            ),
        ]);
        lines.extend(super::hanging(line, room + 3));
    }
    draw_popup(frame, area, width, " Messages, newest first ", lines, theme);
}

/// A bordered box over the view, centred, sized to its lines, which the
/// next key closes (and says so).
fn draw_popup(
    frame: &mut Frame,
    area: Rect,
    width: u16,
    title: &str,
    mut lines: Vec<Line>,
    theme: &Theme,
) {
    lines.push(Line::default());
    lines.push(Line::from(Span::styled(
        " any key closes this",
        theme.role(Role::Muted),
    )));
    let height = (lines.len() as u16 + 2).min(area.height);
    let rect = super::centered(area, width + 2, height);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines)
            .style(theme.base())
            .wrap(ratatui::widgets::Wrap { trim: false })
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(title.to_string())
                    .style(theme.base()),
            ),
        rect,
    );
}

/// One audit entry whole: who, as which login, why, and what it changed
/// field by field (the before and after the ledger stored with it).
pub fn draw_audit_entry(frame: &mut Frame, area: Rect, app: &dyn Shown, seq: i64, theme: &Theme) {
    let Some(entry) = app
        .snapshot()
        .and_then(|snapshot| snapshot.audit.iter().find(|entry| entry.seq == seq))
    else {
        return;
    };
    let width = area.width.saturating_sub(4).clamp(20, 110);
    let field = |label: &str, value: String, role: Role| {
        Line::from(vec![
            Span::styled(format!(" {label:>9}  "), theme.role(Role::Muted)),
            Span::styled(crate::text::sanitize_line(&value), theme.role(role)),
        ])
    };
    let mut lines = vec![
        field("action", entry.action.clone(), Role::Accent),
        field("at", entry.at.to_rfc3339(), Role::Text),
        field(
            "by",
            crate::ledger::model::name_and_login(&entry.operator, &entry.db_role),
            Role::Text,
        ),
        field(
            "key",
            entry.op_key.clone().unwrap_or_else(|| "—".into()),
            Role::Text,
        ),
        field(
            "target",
            entry.target.clone().unwrap_or_else(|| "—".into()),
            Role::Text,
        ),
        field(
            "reason",
            entry.reason.clone().unwrap_or_default(),
            Role::Text,
        ),
        field("hash", entry.hash.clone(), Role::Muted),
        Line::default(),
    ];
    let changed = match (&entry.before, &entry.after) {
        (Some(before), Some(after)) => crate::ledger::history::params_diff(before, after),
        (None, Some(_)) => vec!["created".to_string()],
        _ => Vec::new(),
    };
    if changed.is_empty() {
        lines.push(field(
            "changed",
            "nothing (a note on the record)".into(),
            Role::Muted,
        ));
    }
    for (index, change) in changed.iter().enumerate() {
        let label = if index == 0 { "changed" } else { "" };
        lines.push(field(label, change.clone(), Role::Warn));
    }
    let lines = super::hanging_all(lines, width as usize);
    draw_popup(
        frame,
        area,
        width,
        &format!(" Audit entry #{seq} "),
        lines,
        theme,
    );
}
