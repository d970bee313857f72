//! Drawing: pure functions of the app state and the theme. Nothing here
//! waits on anything; a frame is laid out from the latest snapshot. The
//! views read the state through [`Shown`], its read-only face.

mod detail;
mod dialog;
mod finance;
mod header;
mod help;
mod table;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Block;

use super::app::{App, HelpRoom, Overlay, Shown, View};
use super::theme::Theme;

/// A frame of the console. The views see the state only as [`Shown`];
/// what the help could show is the one thing a frame tells the state back
/// ([`App::help_laid_out`]).
pub fn draw(frame: &mut Frame, app: &App, theme: &Theme) {
    let shown: &dyn Shown = app;
    if let Some(room) = draw_shown(frame, shown, theme) {
        app.help_laid_out(room);
    }
}

/// A frame from the state's read-only face; the help's room when the help
/// is open.
fn draw_shown(frame: &mut Frame, app: &dyn Shown, theme: &Theme) -> Option<HelpRoom> {
    let area = frame.area();
    frame.render_widget(Block::default().style(theme.base()), area);
    let [header_area, tabs_area, body_area, status_area, keys_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    header::draw_header(frame, header_area, app, theme);
    header::draw_tabs(frame, tabs_area, app, theme);
    match app.detail() {
        Some(detail) => detail::draw(frame, body_area, detail, theme),
        None if app.current_view() == View::Finance => finance::draw(frame, body_area, app, theme),
        None => table::draw(frame, body_area, app, theme),
    }
    header::draw_status(frame, status_area, app, theme);
    header::draw_key_bar(frame, keys_area, app, theme);
    let help_room = match app.overlay() {
        Some(Overlay::Help) => Some(help::draw(frame, area, app, theme)),
        Some(Overlay::About) => {
            help::draw_about(frame, area, app, theme);
            None
        }
        Some(Overlay::Messages) => {
            help::draw_messages(frame, area, app, theme);
            None
        }
        Some(Overlay::AuditEntry(seq)) => {
            help::draw_audit_entry(frame, area, app, seq, theme);
            None
        }
        None => None,
    };
    if let Some(dialog) = app.dialog() {
        // The keys a bulk action names take a line or two more.
        let height = if dialog.names.is_some() { 16 } else { 14 };
        dialog::draw(frame, centered(area, 72, height), dialog, theme);
    }
    help_room
}

/// A rectangle of at most `width` x `height`, centred in `area`.
pub fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

/// A line of a label (every span but the last) and a value, laid out in
/// `width` columns: the value is wrapped at its spaces only — never inside
/// a path, a URL or a key at a `-` or `/`; only a word longer than the
/// room is broken — and every line after the first starts under the
/// value, not at column 0, so a wrapped key still reads as one value. A
/// line whose label leaves too little room is left to the paragraph.
pub fn hanging(line: Line<'static>, width: usize) -> Vec<Line<'static>> {
    let Some((value, label)) = line.spans.split_last() else {
        return vec![line];
    };
    let indent: usize = label.iter().map(|span| span.width()).sum();
    let room = width.saturating_sub(indent);
    if label.is_empty() || room < 12 || value.width() <= room {
        return vec![line];
    }
    textwrap::wrap(&value.content, at_spaces(room))
        .into_iter()
        .enumerate()
        .map(|(index, piece)| {
            let mut spans = if index == 0 {
                label.to_vec()
            } else {
                vec![Span::raw(" ".repeat(indent))]
            };
            spans.push(Span::styled(piece.into_owned(), value.style));
            Line::from(spans).style(line.style)
        })
        .collect()
}

/// Wrapping at spaces only, breaking only a word longer than `width`.
fn at_spaces(width: usize) -> textwrap::Options<'static> {
    textwrap::Options::new(width)
        .word_separator(textwrap::WordSeparator::AsciiSpace)
        .word_splitter(textwrap::WordSplitter::NoHyphenation)
        .break_words(true)
}

/// [`hanging`] for every line.
pub fn hanging_all(lines: Vec<Line<'static>>, width: usize) -> Vec<Line<'static>> {
    lines
        .into_iter()
        .flat_map(|line| hanging(line, width))
        .collect()
}
