//! Moving through a view: the selection, the fetched window, sorting, the
//! detail, and the small toggles of the key bar.

use std::time::Duration;

use super::{Action, App, Detail, Mode, NOT_IN_HISTORY, Overlay, Prompt, Task, View, WINDOW};
use crate::console::theme::Role;

impl App {
    pub(super) fn reselect(&mut self, view: View) {
        if view == self.view {
            self.lists[view].visited = true;
        } else if !self.lists[view].visited {
            self.select(view, 0);
            return;
        }
        let list = &self.lists[view];
        let model = &self.models[view];
        let index = list
            .selected_id
            .as_deref()
            .and_then(|id| model.position(id))
            .unwrap_or_else(|| list.selected.min(model.rows.len().saturating_sub(1)));
        self.select(view, index);
    }

    /// Selects the row at `index` of a view (the last one past the end);
    /// the selection follows that item across refreshes.
    pub fn select(&mut self, view: View, index: usize) {
        let model = &self.models[view];
        let index = index.min(model.rows.len().saturating_sub(1));
        self.lists[view].selected = index;
        self.lists[view].selected_id = model.rows.get(index).map(|row| row.id.clone());
    }

    fn sort_view(&mut self, view: View) {
        if let Some((column, descending)) = self.lists[view].sort {
            self.models[view].sort(column, descending);
            let title = self.models[view]
                .columns
                .get(column)
                .map(|c| c.title)
                .unwrap_or("?");
            let arrow = if descending { "↓" } else { "↑" };
            self.set_status(
                format!("sorted by {title} {arrow} (within the loaded rows)"),
                Role::Muted,
            );
        }
        self.reselect(view);
    }

    fn move_window(&mut self, direction: i64) -> Vec<Task> {
        let Some(pane) = self.pane_index() else {
            return Vec::new();
        };
        let total = self.totals[self.view].max(0) as usize;
        let offset = self.offsets[pane];
        let next = if direction > 0 {
            let end = offset + self.models[self.view].rows.len();
            if end >= total {
                return Vec::new();
            }
            offset + WINDOW / 2
        } else {
            if offset == 0 {
                return Vec::new();
            }
            offset.saturating_sub(WINDOW / 2)
        };
        self.offsets[pane] = next;
        vec![Task::Repoll]
    }

    fn scroll_detail(&mut self, delta: i32) {
        if let Some(detail) = &mut self.detail {
            detail.scroll = (detail.scroll as i32 + delta).max(0) as u16;
        }
    }

    /// Moves the selection, or scrolls the open detail; past either end of
    /// the fetched window, fetches the next one.
    pub(super) fn navigate(&mut self, action: Action) -> Vec<Task> {
        let page = self.page_size;
        if self.detail.is_some() {
            let delta = match action {
                Action::Up => -1,
                Action::Down => 1,
                Action::PageUp => -(page as i32),
                Action::PageDown => page as i32,
                _ => return Vec::new(),
            };
            self.scroll_detail(delta);
            return Vec::new();
        }
        let view = self.view;
        let rows = self.models[view].rows.len();
        let selected = self.lists[view].selected;
        match action {
            Action::Up if selected == 0 => return self.move_window(-1),
            Action::Up => self.select(view, selected - 1),
            Action::Down if selected + 1 >= rows => return self.move_window(1),
            Action::Down => self.select(view, selected + 1),
            Action::PageUp => self.select(view, selected.saturating_sub(page)),
            Action::PageDown => self.select(view, selected + page),
            Action::Home => {
                self.select(view, 0);
                if let Some(pane) = self.pane_index()
                    && self.offsets[pane] > 0
                {
                    self.offsets[pane] = 0;
                    self.lists[view].selected_id = None;
                    return vec![Task::Repoll];
                }
            }
            Action::End => {
                self.select(view, rows.saturating_sub(1));
                if let Some(pane) = self.pane_index() {
                    let total = self.totals[view].max(0) as usize;
                    let last_window = total.saturating_sub(WINDOW);
                    if self.offsets[pane] < last_window {
                        self.offsets[pane] = last_window;
                        self.pending_jump_to_end = true;
                        return vec![Task::Repoll];
                    }
                }
            }
            _ => {}
        }
        Vec::new()
    }

    pub(super) fn sort_next(&mut self) -> Vec<Task> {
        let view = self.view;
        let columns = self.models[view].columns.len();
        let next = match self.lists[view].sort {
            None => 0,
            Some((column, _)) if column + 1 < columns => column + 1,
            Some(_) => {
                self.lists[view].sort = None;
                self.set_status("sort: ledger order (most urgent first)", Role::Muted);
                return vec![Task::Repoll];
            }
        };
        self.lists[view].sort = Some((next, false));
        self.sort_view(view);
        Vec::new()
    }

    pub(super) fn sort_reverse(&mut self) -> Vec<Task> {
        let view = self.view;
        if let Some((column, descending)) = self.lists[view].sort {
            self.lists[view].sort = Some((column, !descending));
            self.sort_view(view);
        }
        Vec::new()
    }

    /// In the detail, follows the highlighted link; else opens the selected row.
    pub(super) fn open_selected(&mut self) -> Vec<Task> {
        if let Some(detail) = &self.detail {
            let Some(link) = detail
                .history
                .as_ref()
                .and_then(|history| history.links.get(detail.link))
            else {
                return Vec::new();
            };
            let (from, to) = (detail.op_key.clone(), link.op_key.clone());
            let mut trail = detail.trail.clone();
            trail.push(from);
            return self.show_detail(to, trail);
        }
        if self.current_view() == View::Audit {
            // An entry is read for what it says and changed; its effect is
            // one ':' away.
            if let Some(seq) = self.selected_row().and_then(|row| row.id.parse().ok()) {
                self.mode = Mode::Overlay(Overlay::AuditEntry(seq));
            }
            return Vec::new();
        }
        let Some(op_key) = self.selected_row().and_then(|row| row.op_key.clone()) else {
            return Vec::new();
        };
        self.open_detail(op_key)
    }

    /// Opens any key's detail; from an open detail, Esc comes back to it.
    pub(super) fn open_detail(&mut self, op_key: String) -> Vec<Task> {
        let trail = match &self.detail {
            Some(detail) => {
                let mut trail = detail.trail.clone();
                trail.push(detail.op_key.clone());
                trail
            }
            None => Vec::new(),
        };
        self.show_detail(op_key, trail)
    }

    fn show_detail(&mut self, op_key: String, trail: Vec<String>) -> Vec<Task> {
        self.detail = Some(Detail {
            op_key: op_key.clone(),
            history: None,
            error: None,
            scroll: 0,
            link: 0,
            trail,
        });
        vec![Task::LoadDetail(op_key)]
    }

    pub(super) fn next_link(&mut self) -> Vec<Task> {
        let Some(detail) = &mut self.detail else {
            self.set_status(
                "links are in an effect's detail: Enter opens one",
                Role::Muted,
            );
            return Vec::new();
        };
        let count = detail.history.as_ref().map_or(0, |h| h.links.len());
        if count == 0 {
            self.set_status("this effect is tied to no other", Role::Muted);
            return Vec::new();
        }
        detail.link = (detail.link + 1) % count;
        Vec::new()
    }

    /// Back along the links followed, then out of the detail, else clears the filter.
    pub(super) fn back(&mut self) -> Vec<Task> {
        if let Some(detail) = &mut self.detail {
            match detail.trail.pop() {
                Some(previous) => {
                    let trail = std::mem::take(&mut detail.trail);
                    return self.show_detail(previous, trail);
                }
                None => self.detail = None,
            }
        } else if !self.filter_text.is_empty() {
            // Through the same path as applying one: every view, the small
            // client-filtered ones included, shows everything again now.
            self.filter_text.clear();
            return self.apply_filter();
        }
        Vec::new()
    }

    pub(super) fn type_instant(&mut self) -> Vec<Task> {
        if self.at.is_none() {
            self.set_status(NOT_IN_HISTORY, Role::Muted);
            return Vec::new();
        }
        // An empty line to type into; the instant shown now is in the hint.
        self.status = None;
        self.mode = Mode::Prompt(Prompt::Instant(String::new()));
        Vec::new()
    }

    pub(super) fn toggle_pause(&mut self) -> Vec<Task> {
        self.paused = !self.paused;
        self.set_status(
            if self.paused {
                "‖ polling paused (p resumes)"
            } else {
                "▶ polling resumed"
            },
            Role::Muted,
        );
        vec![Task::Repoll]
    }

    pub(super) fn copy_selected(&mut self) -> Vec<Task> {
        let Some((op_key, _)) = self.selected_effect() else {
            return Vec::new();
        };
        // A newline in a pasted key would run the rest as a shell command.
        if crate::text::sanitize_line(&op_key) != op_key {
            self.set_status(
                "this key contains control characters: not copied; use `effectwatch show`",
                Role::Warn,
            );
            return Vec::new();
        }
        self.set_status(
            format!("copied {}", crate::text::sanitize_line(&op_key)),
            Role::Ok,
        );
        vec![Task::Copy(op_key)]
    }

    pub(super) fn change_interval(&mut self, faster: bool) -> Vec<Task> {
        let seconds = self.poll_interval.as_secs_f64();
        let next = if faster {
            (seconds / 2.0).max(0.25)
        } else {
            (seconds * 2.0).min(300.0)
        };
        self.poll_interval = Duration::from_secs_f64(next);
        self.set_status(format!("polling every {next:.2} s"), Role::Muted);
        vec![Task::Repoll]
    }
}
