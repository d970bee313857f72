use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};

use crate::console::app::{Shown, View};
use crate::console::model::{Row as ModelRow, SortValue, TableModel};
use crate::console::theme::{Role, Theme};
use crate::ledger::panes::Pane;
use crate::text::{truncate, truncate_middle, truncate_names};

pub fn draw(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme) {
    let view = app.current_view();
    // The duplicates pane lists what needs a look; the rest is counted.
    let title = match (view, app.snapshot().map(|s| s.replays_only)) {
        (View::Pane(Pane::Duplicates), Some(Some(replays))) if replays > 0 => format!(
            "{} · {} (v lists them)",
            view.title(),
            crate::format::replays_not_listed(replays)
        ),
        (View::Pane(Pane::Duplicates), Some(None)) if !app.filter().is_empty() => {
            format!("{} · {}", view.title(), app.filter().text())
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

pub fn draw_titled(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme, title: &str) {
    let model = app.model();
    let list = app.list(app.current_view());
    let position = if model.rows.is_empty() {
        String::new()
    } else {
        let total = app.total(app.current_view());
        format!(" {} of {total} ", window_start(app) + list.selected + 1)
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
        frame.render_widget(
            Paragraph::new(nothing_shown(app))
                .style(theme.role(Role::Muted))
                .block(block),
            area,
        );
        return;
    }
    let inner_height = area.height.saturating_sub(2) as usize;
    // Only the rows that can be seen are laid out: a frame's cost follows
    // the terminal's height, not the number of items loaded.
    let first = first_visible(list.selected, inner_height, model.rows.len());
    let last = (first + inner_height).min(model.rows.len());
    let shown = &model.rows[first..last];
    let widths = column_widths(model, shown, area.width);
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
    let table = Table::new(
        body_rows(model, shown, &widths, theme),
        widths
            .iter()
            .filter(|w| **w > 0)
            .map(|w| Constraint::Length(*w)),
    )
    .header(header_row(model, &widths, list.sort, theme))
    .block(block)
    .column_spacing(1)
    .row_highlight_style(theme.selection())
    .highlight_symbol("▶ ");
    let mut state = TableState::default().with_selected(Some(list.selected - first));
    frame.render_stateful_widget(table, area, &mut state);
}

/// Where the current pane's window of rows starts among its items (0 for
/// the views that are not paged).
fn window_start(app: &dyn Shown) -> usize {
    match app.current_view() {
        View::Pane(pane) => Pane::ALL
            .iter()
            .position(|p| *p == pane)
            .map(|index| app.offsets()[index])
            .unwrap_or(0),
        _ => 0,
    }
}

/// What an empty table says: why it has no rows.
fn nothing_shown(app: &dyn Shown) -> String {
    let view = app.current_view();
    if app.snapshot().is_none() {
        "waiting for the first poll…".to_string()
    } else if matches!(view, View::Pane(_)) && !app.pane_rows_match_filter() {
        "reading the rows of the new filter…".to_string()
    } else if app.filter().is_empty() {
        format!("✓ nothing in {}", view.title().to_lowercase())
    } else {
        "nothing matches the filter (Esc clears it)".to_string()
    }
}

/// The rows on screen, each cell cut to its column. Names are cut where
/// the names on screen agree; the rest keep their head. A column given no
/// room is left out, gap and all.
fn body_rows(
    model: &TableModel,
    shown: &[ModelRow],
    widths: &[u16],
    theme: &Theme,
) -> Vec<Row<'static>> {
    let distinct: Vec<Option<Vec<String>>> = (0..model.columns.len())
        .map(|index| {
            (kind(model, index) == Kind::Names).then(|| {
                let texts: Vec<&str> = shown
                    .iter()
                    .map(|row| row.cells.get(index).map_or("", |cell| cell.text.as_str()))
                    .collect();
                truncate_names(&texts, widths[index] as usize)
            })
        })
        .collect();
    shown
        .iter()
        .enumerate()
        .map(|(position, row)| {
            let cells = row
                .cells
                .iter()
                .zip(widths)
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
        })
        .collect()
}

/// The columns' titles, the sorted one with its arrow.
fn header_row(
    model: &TableModel,
    widths: &[u16],
    sort: Option<(usize, bool)>,
    theme: &Theme,
) -> Row<'static> {
    Row::new(
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
                Cell::from(truncate(
                    &format!("{}{arrow}", column.title),
                    widths[index] as usize,
                ))
            })
            .collect::<Vec<_>>(),
    )
    .style(theme.role(Role::Muted).add_modifier(Modifier::BOLD))
}

/// The selected row's key, when its column is too narrow to show it whole.
fn cut_key(model: &TableModel, widths: &[u16], selected: usize) -> Option<String> {
    let column = model.columns.iter().position(|column| column.key)?;
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
/// here, with an ellipsis, and never silently by the layout. When every
/// column has its room, the names and then the decisions in words get
/// what their longest value on screen needs, and flexible columns share
/// the rest. Short of room, columns give way by what an operator decides
/// by ([`Kind`]):
/// 1. every column gives up what no value on screen fills;
/// 2. context goes, whole, from the right;
/// 3. free text, then names, are cut down to [`FLOOR`], the widest first
///    (a name is cut where the names on screen agree: [`truncate_names`]);
/// 4. what the operator decides by goes, whole, from the right (what is
///    said in words first), then the names but the first, which is cut to
///    what is left.
///
/// Money is never cut: it keeps its currency or goes whole.
pub(crate) fn column_widths(model: &TableModel, shown: &[ModelRow], total_width: u16) -> Vec<u16> {
    let columns = &model.columns;
    let kinds: Vec<Kind> = (0..columns.len()).map(|i| kind(model, i)).collect();
    // What each column's values on screen and its title need.
    let needs: Vec<u16> = columns
        .iter()
        .enumerate()
        .map(|(index, column)| {
            shown
                .iter()
                .filter_map(|row| row.cells.get(index))
                .map(|cell| cell.text.chars().count())
                .chain([column.title.chars().count()])
                .max()
                .unwrap_or(0) as u16
        })
        .collect();
    let total = total_width as usize;
    // The highlight symbol, each column shown and the gap between two.
    let used = |widths: &[u16]| -> usize {
        let shown: Vec<usize> = widths
            .iter()
            .filter(|w| **w > 0)
            .map(|w| *w as usize)
            .collect();
        HIGHLIGHT + shown.iter().sum::<usize>() + shown.len().saturating_sub(1)
    };
    let mut widths: Vec<u16> = columns.iter().map(|c| c.width).collect();
    let names_short: usize = (0..widths.len())
        .filter(|&i| kinds[i] == Kind::Names)
        .map(|i| needs[i].saturating_sub(widths[i]) as usize)
        .sum();
    if used(&widths) + names_short > total {
        for (width, need) in widths.iter_mut().zip(&needs) {
            *width = (*width).min(*need);
        }
        drop_from_the_right(&mut widths, &kinds, Kind::Context, total, used);
        for cut in [Kind::Text, Kind::Names] {
            while used(&widths) > total {
                let widest = (0..widths.len())
                    .filter(|&i| kinds[i] == cut && widths[i] > FLOOR)
                    .max_by_key(|&i| (widths[i], std::cmp::Reverse(i)));
                match widest {
                    Some(index) => widths[index] -= 1,
                    None => break,
                }
            }
        }
        drop_from_the_right(&mut widths, &kinds, Kind::Text, total, used);
        drop_from_the_right(&mut widths, &kinds, Kind::Decides, total, used);
        let first_name = kinds.iter().position(|kind| *kind == Kind::Names);
        for index in (0..widths.len()).rev() {
            if used(&widths) <= total {
                break;
            }
            if Some(index) != first_name {
                widths[index] = 0;
            }
        }
        if let Some(index) = first_name {
            let over = used(&widths).saturating_sub(total) as u16;
            widths[index] = widths[index].saturating_sub(over);
        }
    }
    // Room left over: the names first, then what is decided by in words,
    // up to what their values need; the flexible columns share the rest.
    let mut spare = total.saturating_sub(used(&widths)) as u16;
    for kind in [Kind::Names, Kind::Text] {
        for index in 0..widths.len() {
            if kinds[index] == kind && widths[index] > 0 {
                let extra = needs[index].saturating_sub(widths[index]).min(spare);
                widths[index] += extra;
                spare -= extra;
            }
        }
    }
    let flexible: Vec<usize> = (0..widths.len())
        .filter(|&i| columns[i].flexible && widths[i] > 0)
        .collect();
    if let Some(&first) = flexible.first() {
        for &index in &flexible {
            widths[index] += spare / flexible.len() as u16;
        }
        widths[first] += spare % flexible.len() as u16;
    }
    widths
}

/// The highlight symbol's width, before the first column.
const HIGHLIGHT: usize = 2;

/// The narrowest a name or a free text is cut to before columns go whole.
const FLOOR: u16 = 12;

/// Sets to nothing the columns of `kind`, from the right, until the table fits.
fn drop_from_the_right(
    widths: &mut [u16],
    kinds: &[Kind],
    kind: Kind,
    total: usize,
    used: impl Fn(&[u16]) -> usize,
) {
    for index in (0..widths.len()).rev() {
        if used(widths) <= total {
            return;
        }
        if kinds[index] == kind {
            widths[index] = 0;
        }
    }
}

/// What a column is to an operator choosing what to do with an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Tells the items apart: the key, the target, the holder's key. Cut
    /// where the names on screen agree, and the last to go.
    Names,
    /// What the operator decides by, read whole: an amount, a state,
    /// whether it was sent, when and by whom (the audit log).
    Decides,
    /// What the operator decides by, said in words (what a duplicate
    /// needs, the decision an escalation asks for, a reason): cut at its
    /// end before a name is cut.
    Text,
    /// Context the detail repeats: ages, counts, requesters, errors,
    /// references. The first to go, whole.
    Context,
}

fn kind(model: &TableModel, index: usize) -> Kind {
    let column = &model.columns[index];
    let money = model
        .rows
        .first()
        .and_then(|row| row.cells.get(index))
        .is_some_and(|cell| matches!(cell.sort, SortValue::Money { .. }));
    match column.title {
        _ if column.kept => Kind::Names,
        title if is_name(title) => Kind::Names,
        "holder amount" | "group total" | "approved" => Kind::Context,
        _ if money => Kind::Decides,
        "action" | "state" | "holder" | "dispatched" | "mismatch" | "when" | "operator" => {
            Kind::Decides
        }
        "needs" | "reconciled" | "decision needed" | "reason" | "compensation" => Kind::Text,
        _ => Kind::Context,
    }
}

/// Columns of names, whose words tell rows apart.
fn is_name(title: &str) -> bool {
    matches!(title, "key" | "held key" | "held by" | "target")
}
