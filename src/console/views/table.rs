use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};

use crate::console::app::{App, View};
use crate::console::model::TableModel;
use crate::console::theme::{Role, Theme};
use crate::ledger::panes::Pane;
use crate::text::{truncate, truncate_distinct, truncate_middle};

pub fn draw(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let view = app.current_view();
    // The duplicates pane lists what needs a look; the rest is counted.
    let title = match (view, app.snapshot.as_ref().map(|s| s.replays_only)) {
        (View::Pane(Pane::Duplicates), Some(Some(replays))) if replays > 0 => format!(
            "{} · {} (v lists them)",
            view.title(),
            crate::format::replays_not_listed(replays)
        ),
        (View::Pane(Pane::Duplicates), Some(None)) if !app.filter.is_empty() => {
            format!("{} · {}", view.title(), app.filter.text())
        }
        _ => view.title().to_string(),
    };
    // A new filter's rows come with the next read; until then the rows
    // shown are the previous filter's, and the title says so.
    let title = match view {
        View::Pane(_) if !app.pane_rows_match_filter() => {
            format!("{title} · reading the rows of the new filter…")
        }
        _ => title,
    };
    draw_titled(frame, area, app, theme, &title);
}

pub fn draw_titled(frame: &mut Frame, area: Rect, app: &App, theme: &Theme, title: &str) {
    let view = app.current_view();
    let model = app.model();
    let list = &app.lists[app.view];
    let total = app.totals[app.view];
    let offset = match view {
        View::Pane(pane) => crate::ledger::panes::Pane::ALL
            .iter()
            .position(|p| *p == pane)
            .map(|index| app.offsets[index])
            .unwrap_or(0),
        _ => 0,
    };
    let position = if model.rows.is_empty() {
        String::new()
    } else {
        format!(" {} of {total} ", offset + list.selected + 1)
    };
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(theme.border())
        .title(Span::styled(
            format!(" {title} "),
            theme.role(Role::Accent).add_modifier(Modifier::BOLD),
        ))
        .title_bottom(Line::from(position.clone()).right_aligned());

    if model.rows.is_empty() {
        let message = if app.snapshot.is_none() {
            "waiting for the first poll…".to_string()
        } else if matches!(view, View::Pane(_)) && !app.pane_rows_match_filter() {
            "reading the rows of the new filter…".to_string()
        } else if app.filter.is_empty() {
            format!("✓ nothing in {}", view.title().to_lowercase())
        } else {
            "nothing matches the filter (Esc clears it)".to_string()
        };
        frame.render_widget(
            Paragraph::new(message)
                .style(theme.role(Role::Muted))
                .block(block),
            area,
        );
        return;
    }

    let inner_height = area.height.saturating_sub(2) as usize;
    let widths = column_widths(model, area.width);
    // A key cut to fit is still there whole, for the selected row.
    let block = match cut_key(model, &widths, list.selected) {
        Some(key) => {
            let room = (area.width as usize).saturating_sub(position.chars().count() + 4);
            block.title_bottom(
                Line::from(Span::styled(
                    format!(" {} ", truncate_middle(&key, room)),
                    theme.role(Role::Accent),
                ))
                .left_aligned(),
            )
        }
        None => block,
    };
    // Only the rows that can be seen are laid out: a frame's cost follows
    // the terminal's height, not the number of items loaded.
    let first = first_visible(list.selected, inner_height, model.rows.len());
    let last = (first + inner_height).min(model.rows.len());
    // Identifiers are cut so that two different ones on screen never read
    // alike; the rest keep their head.
    let shown = &model.rows[first..last];
    let distinct: Vec<Option<Vec<String>>> = model
        .columns
        .iter()
        .enumerate()
        .map(|(index, column)| {
            keeps_its_end(column.title).then(|| {
                let texts: Vec<&str> = shown
                    .iter()
                    .map(|row| row.cells.get(index).map_or("", |cell| cell.text.as_str()))
                    .collect();
                truncate_distinct(&texts, widths[index] as usize)
            })
        })
        .collect();
    // A column given no room is left out, gap and all.
    let rows = shown.iter().enumerate().map(|(position, row)| {
        let cells = row
            .cells
            .iter()
            .zip(&widths)
            .zip(&distinct)
            .filter(|((_, width), _)| **width > 0)
            .map(|((cell, width), distinct)| {
                let text = match distinct {
                    Some(cuts) => cuts[position].clone(),
                    None => truncate(&cell.text, *width as usize),
                };
                Cell::from(text).style(theme.role(cell.role))
            });
        let mut table_row = Row::new(cells);
        if let Some(role) = row.flag {
            table_row = table_row.style(theme.role(role));
        }
        table_row
    });
    let sort = list.sort;
    let header = Row::new(
        model
            .columns
            .iter()
            .enumerate()
            .filter(|(index, _)| widths[*index] > 0)
            .map(|(index, column)| {
                let arrow = match sort {
                    Some((sorted, false)) if sorted == index => " ↑",
                    Some((sorted, true)) if sorted == index => " ↓",
                    _ => "",
                };
                Cell::from(format!("{}{arrow}", column.title))
            }),
    )
    .style(theme.role(Role::Muted).add_modifier(Modifier::BOLD));
    let shown_widths = widths
        .iter()
        .filter(|w| **w > 0)
        .map(|w| Constraint::Length(*w));
    let table = Table::new(rows, shown_widths)
        .header(header)
        .block(block)
        .column_spacing(1)
        .row_highlight_style(theme.selection())
        .highlight_symbol("▶ ");
    let mut state = TableState::default().with_selected(Some(list.selected - first));
    frame.render_stateful_widget(table, area, &mut state);
}

/// The selected row's key, when its column is too narrow to show it whole.
fn cut_key(model: &TableModel, widths: &[u16], selected: usize) -> Option<String> {
    let column = model
        .columns
        .iter()
        .position(|column| matches!(column.title, "key" | "held key"))?;
    let text = &model.rows.get(selected)?.cells.get(column)?.text;
    (text.chars().count() > widths[column] as usize).then(|| text.clone())
}

/// Keeps the selection visible with the fewest jumps of the page.
fn first_visible(selected: usize, height: usize, rows: usize) -> usize {
    if height == 0 || rows <= height {
        return 0;
    }
    let page = selected / height;
    (page * height).min(rows - height)
}

/// Widths that add up to at most the table's width, so every cut is made
/// here, with an ellipsis, and never silently by the layout: flexible
/// columns share what is left over, or give up space first when short.
pub(crate) fn column_widths(model: &TableModel, total_width: u16) -> Vec<u16> {
    const HIGHLIGHT: u16 = 2;
    let count = model.columns.len() as u16;
    let available = total_width.saturating_sub(HIGHLIGHT + count.saturating_sub(1));
    let mut widths: Vec<u16> = model.columns.iter().map(|c| c.width).collect();
    let wanted: u16 = widths.iter().sum();
    if wanted <= available {
        let mut spare = available - wanted;
        // The key is what an operator reads and types back: it gets the
        // room it needs first, before the context columns share the rest.
        for (index, column) in model.columns.iter().enumerate() {
            if matches!(column.title, "key" | "held key") {
                let longest = model
                    .rows
                    .iter()
                    .filter_map(|row| row.cells.get(index))
                    .map(|cell| cell.text.chars().count())
                    .max()
                    .unwrap_or(0) as u16;
                let extra = longest.saturating_sub(widths[index]).min(spare);
                widths[index] += extra;
                spare -= extra;
            }
        }
        let flexible: Vec<usize> = (0..widths.len())
            .filter(|&i| model.columns[i].flexible)
            .collect();
        if let Some(&first) = flexible.first() {
            for &index in &flexible {
                widths[index] += spare / flexible.len() as u16;
            }
            widths[first] += spare % flexible.len() as u16;
        }
        return widths;
    }
    // Short of room, columns give way by what an operator can spare:
    // context (target, requester…) first, down to nothing; then the other
    // columns; the key last, keeping its head and tail; money never drops
    // its currency.
    let mut deficit = wanted - available;
    for giving in [
        Gives::First,
        Gives::Whole,
        Gives::Flexibly,
        Gives::Some,
        Gives::Last,
    ] {
        // Columns that repeat what the detail says go whole, from the
        // right, once the context is gone and before anything else is cut.
        if giving == Gives::Whole {
            for index in (0..widths.len()).rev() {
                if deficit > 0 && gives_way(model, index) == Gives::Whole {
                    // A column with no room is left out, and its gap with it.
                    deficit = deficit.saturating_sub(widths[index] + 1);
                    widths[index] = 0;
                }
            }
            continue;
        }
        while deficit > 0 {
            let mut shrunk = false;
            for (index, column) in model.columns.iter().enumerate() {
                let gives = gives_way(model, index);
                if deficit > 0 && gives == giving && widths[index] > gives.floor(column.width) {
                    widths[index] -= 1;
                    deficit -= 1;
                    shrunk = true;
                }
            }
            if !shrunk {
                break;
            }
        }
    }
    // Still too wide with every column at its floor: whole columns go,
    // context first, from the right, so that no cut is left to the layout
    // (which cuts without an ellipsis, and can make two keys read alike).
    for giving in [Gives::Flexibly, Gives::Some, Gives::Never] {
        for index in (0..widths.len()).rev() {
            if deficit == 0 {
                break;
            }
            if gives_way(model, index) == giving && widths[index] > 0 {
                deficit = deficit.saturating_sub(widths[index] + 1);
                widths[index] = 0;
            }
        }
    }
    widths
}

/// How a column gives up room when the terminal is narrow, in the order
/// the variants are listed; money does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gives {
    /// Goes whole when short of room: it repeats what the detail says.
    Whole,
    First,
    Flexibly,
    Some,
    Last,
    Never,
}

impl Gives {
    /// The narrowest a column of this kind becomes.
    fn floor(self, width: u16) -> u16 {
        match self {
            Gives::Whole | Gives::First => 0,
            Gives::Flexibly | Gives::Some => 4.min(width),
            Gives::Last => 14.min(width),
            Gives::Never => width,
        }
    }
}

fn gives_way(model: &TableModel, index: usize) -> Gives {
    let column = &model.columns[index];
    match column.title {
        // The finance review's context: the group's sum, what was approved
        // and why it is suspected are in the detail.
        "group total" | "approved" | "why" => Gives::Whole,
        _ if column.kept => Gives::Last,
        "target" | "requester" | "requesters" | "by" | "role" | "sink" | "provider ref"
        | "holder" | "holder age" | "last error" | "first seen" | "tries" | "replays"
        | "in flight" => Gives::First,
        "amount" | "holder amount" | "excess" => Gives::Never,
        "needs" => Gives::Last,
        title if keeps_its_end(title) => Gives::Last,
        _ if column.flexible => Gives::Flexibly,
        _ => Gives::Some,
    }
}

/// Columns of identifiers, whose ends tell rows apart.
fn keeps_its_end(title: &str) -> bool {
    matches!(title, "key" | "held key" | "held by" | "target")
}
