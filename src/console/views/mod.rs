//! Drawing: pure functions of the app state and the theme. Nothing here
//! waits on anything; a frame is laid out from the latest snapshot.

mod detail;
mod dialog;
mod finance;
mod header;
mod help;
mod table;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::Block;

use super::app::{App, Overlay, View};
use super::theme::Theme;

pub fn draw(frame: &mut Frame, app: &App, theme: &Theme) {
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
    match &app.detail {
        Some(detail) => detail::draw(frame, body_area, detail, theme),
        None if app.current_view() == View::Finance => finance::draw(frame, body_area, app, theme),
        None => table::draw(frame, body_area, app, theme),
    }
    header::draw_status(frame, status_area, app, theme);
    header::draw_key_bar(frame, keys_area, app, theme);
    match app.overlay() {
        Some(Overlay::Help) => help::draw(frame, area, app, theme),
        Some(Overlay::About) => help::draw_about(frame, area, app, theme),
        Some(Overlay::Messages) => help::draw_messages(frame, area, app, theme),
        Some(Overlay::AuditEntry(seq)) => help::draw_audit_entry(frame, area, app, seq, theme),
        None => {}
    }
    if let Some(dialog) = app.dialog() {
        dialog::draw(frame, centered(area, 72, 14), dialog, theme);
    }
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
