use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::console::action::TABLE;
use crate::console::app::{Connection, Notifications, Prompt, Shown, VIEWS, View};
use crate::console::theme::{Role, Theme};
use crate::format::duration_ms;
use crate::ledger::panes::FILTER_FIELDS;

use crate::text::{sanitize_line, truncate_middle};

pub fn draw_header(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme) {
    let header = theme.header();
    let mut parts = vec![Part::new(
        Gives::First,
        header.add_modifier(Modifier::BOLD),
        [" effectwatch ", ""],
    )];
    parts.extend(ledger_parts(app, theme));
    parts.extend(connection_parts(app, theme));
    parts.extend(replica_part(app, theme));
    parts.extend(deaf_part(app, theme));
    parts.extend(durability_part(app, theme));
    parts.extend(polled_part(app, theme));
    if let Some(at) = app.at() {
        parts.push(Part::new(
            Gives::Never,
            header.fg(theme.warn),
            [format!("│ ⏲ AS OF {} ", at.format("%Y-%m-%d %H:%M:%S UTC"))],
        ));
    }
    parts.push(Part::new(
        Gives::Never,
        header,
        [format!("│ {} ", sanitize_line(app.operator()))],
    ));
    let spans = fit(parts, area.width as usize);
    frame.render_widget(Paragraph::new(Line::from(spans)).style(header), area);
}

/// Read-only first, where a long database name or a narrow terminal
/// cannot cut it off; then who the console reads the ledger as, and where.
fn ledger_parts(app: &dyn Shown, theme: &Theme) -> Vec<Part> {
    let header = theme.header();
    let mut parts = Vec::new();
    if app.is_read_only() {
        parts.push(Part::new(
            Gives::Never,
            theme.selection().bg(theme.warn),
            [" READ-ONLY "],
        ));
        parts.push(Part::new(Gives::Never, header, [" "]));
    }
    if let Some(snapshot) = app.snapshot() {
        let role = sanitize_line(&snapshot.role);
        let database = sanitize_line(&snapshot.database);
        parts.push(Part::new(
            Gives::Last,
            header,
            [
                format!("│ {role}@{database} "),
                format!("│ {} ", truncate_middle(&format!("{role}@{database}"), 16)),
            ],
        ));
    }
    parts
}

/// Whether the data is live, and the server while it does not answer.
fn connection_parts(app: &dyn Shown, theme: &Theme) -> Vec<Part> {
    let header = theme.header();
    let (connection, role) = connection_state(app);
    let said = header.fg(theme.role(role).fg.unwrap_or(theme.text));
    let mut parts = vec![
        Part::new(Gives::Never, header, ["│ "]),
        Part::new(Gives::Never, said, [format!("{connection} ")]),
    ];
    if !matches!(app.connection(), Connection::Live)
        && let Some(server) = app.server()
    {
        parts.push(Part::new(
            Gives::Early,
            said,
            [format!("· {} ", sanitize_line(server)), String::new()],
        ));
    }
    parts
}

/// The connection in words, and how loud: live, paused, history, waiting
/// for an answer, or stale.
fn connection_state(app: &dyn Shown) -> (String, Role) {
    // Age is the data's own: from the poll that read it, not from when a
    // failure was noticed (a poll can take seconds to fail).
    let data_age_ms = app
        .data_since()
        .map(|since| since.elapsed().as_millis() as i64);
    let overdue_after_ms = app.poll_interval().as_millis() as i64 + 2_000;
    match app.connection() {
        Connection::Connecting => ("◌ connecting".to_string(), Role::Warn),
        // The past does not change: nothing is live about it.
        Connection::Live if app.at().is_some() => ("⏲ history".to_string(), Role::Warn),
        Connection::Live if app.is_paused() => ("‖ paused".to_string(), Role::Warn),
        Connection::Live => match data_age_ms {
            Some(age) if age > overdue_after_ms => (
                format!("⧗ no answer yet · data {} old", duration_ms(age)),
                Role::Warn,
            ),
            _ => ("● live".to_string(), Role::Ok),
        },
        Connection::Stale { since, .. } => (
            format!(
                "✗ stale for {} · reconnecting",
                duration_ms(data_age_ms.unwrap_or(since.elapsed().as_millis() as i64))
            ),
            Role::Critical,
        ),
    }
}

/// A standby sends no notifications: such a console polls, and its data
/// is as old as the replay behind the primary.
fn replica_part(app: &dyn Shown, theme: &Theme) -> Option<Part> {
    let header = theme.header();
    let snapshot = app.snapshot()?;
    let lag = snapshot.replica_lag?;
    Some(if lag > app.replica_lag_stale_secs() {
        Part::new(
            Gives::Last,
            header.fg(theme.critical),
            [
                format!("· replica {lag:.1} s behind: stale "),
                format!("· {lag:.0} s behind: stale "),
            ],
        )
    } else if snapshot.primary_heard == Some(false) {
        // A failover under way: what it reads stops at the primary's end.
        Part::new(
            Gives::Last,
            header.fg(theme.warn),
            [
                format!("· replica, primary out of reach, {lag:.1} s behind "),
                format!("· replica, no primary {lag:.0} s "),
            ],
        )
    } else {
        Part::new(
            Gives::Early,
            header.fg(theme.muted),
            [
                format!("· replica, {lag:.1} s behind "),
                format!("· replica {lag:.0} s "),
            ],
        )
    })
}

/// A live console on the primary that is not told of changes says so.
fn deaf_part(app: &dyn Shown, theme: &Theme) -> Option<Part> {
    let notifications = app
        .snapshot()
        .filter(|s| app.at().is_none() && s.replica_lag.is_none())
        .filter(|_| matches!(app.connection(), Connection::Live))
        .map(|s| s.notifications);
    let forms = match notifications? {
        Notifications::Reconnecting => [
            "· not listening: changes show at the next poll ",
            "· not listening ",
        ],
        // A transaction pooler took the subscription with the transaction.
        Notifications::Lost => [
            "· notifications do not arrive (a pooler?): polling ",
            "· no notifications: polling ",
        ],
        Notifications::Arriving => return None,
    };
    Some(Part::new(Gives::Last, theme.header().fg(theme.warn), forms))
}

/// Said beside the connection, where it is not cut off on a small
/// terminal; `i` has the sentence.
fn durability_part(app: &dyn Shown, theme: &Theme) -> Option<Part> {
    let risk = app.snapshot()?.durability.as_ref()?.risk?;
    let colour = match risk {
        crate::ledger::durability::Risk::Failover => theme.warn,
        crate::ledger::durability::Risk::Severe => theme.critical,
    };
    Some(Part::new(
        Gives::Last,
        theme.header().fg(colour),
        ["│ ⚠ not failover-safe (i) ", "│ ⚠ failover (i) "],
    ))
}

/// When the data on screen was read, and how long the read took.
fn polled_part(app: &dyn Shown, theme: &Theme) -> Option<Part> {
    let snapshot = app.snapshot()?;
    let at = snapshot.polled_at.format("%H:%M:%S");
    let latency = snapshot.latency.as_millis();
    let forms = match app.at() {
        Some(_) => vec![
            format!("│ read {at} UTC ({latency} ms) "),
            format!("│ read {at} UTC "),
            String::new(),
        ],
        None => vec![
            format!(
                "│ polled {at} UTC ({latency} ms, every {:.1} s) ",
                app.poll_interval().as_secs_f64()
            ),
            format!("│ polled {at} UTC "),
            format!("│ {at} "),
            String::new(),
        ],
    };
    Some(Part::new(Gives::First, theme.header(), forms))
}

/// When a part of the header gives way on a narrow terminal: how the
/// data was polled and the program's name first, then what can be said
/// shorter or left out (the server, the replica), then the warnings'
/// longer words and the ledger's name, cut in its middle. Who is
/// operating, whether the data is live and as of when never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Gives {
    First,
    Early,
    Last,
    Never,
}

/// One part of the header: its forms, longest first (the last may be
/// empty: the part goes).
struct Part {
    gives: Gives,
    style: ratatui::style::Style,
    forms: Vec<String>,
    /// Forms given up so far.
    given: usize,
}

impl Part {
    fn new<S: Into<String>>(
        gives: Gives,
        style: ratatui::style::Style,
        forms: impl IntoIterator<Item = S>,
    ) -> Part {
        Part {
            gives,
            style,
            forms: forms.into_iter().map(Into::into).collect(),
            given: 0,
        }
    }

    fn shown(&self) -> &str {
        &self.forms[self.given]
    }
}

/// The parts in `width`: until the line fits, a part takes its next,
/// shorter form — the first to give way by [`Gives`], among those the one
/// that has given least, then the rightmost.
fn fit(mut parts: Vec<Part>, width: usize) -> Vec<Span<'static>> {
    let length =
        |parts: &[Part]| -> usize { parts.iter().map(|part| part.shown().chars().count()).sum() };
    while length(&parts) > width {
        let next = parts
            .iter_mut()
            .enumerate()
            .filter(|(_, part)| part.gives != Gives::Never && part.given + 1 < part.forms.len())
            .min_by_key(|(index, part)| (part.gives, part.given, std::cmp::Reverse(*index)));
        match next {
            Some((_, part)) => part.given += 1,
            None => break,
        }
    }
    parts
        .into_iter()
        .filter(|part| !part.shown().is_empty())
        .map(|mut part| Span::styled(part.forms.swap_remove(part.given), part.style))
        .collect()
}

pub fn draw_tabs(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme) {
    let mut spans = Vec::new();
    // Before the first answer nothing is known: never a reassuring 0.
    let count_of = |view: View| match app.snapshot() {
        Some(_) => app.total(view).to_string(),
        None => "?".to_string(),
    };
    // Every tab and its count fit: full names, short ones, or the digit alone.
    let labels = |name: fn(View) -> &'static str, spaced: bool| -> Vec<String> {
        VIEWS
            .iter()
            .enumerate()
            .map(|(index, view)| match (name(*view), spaced) {
                ("", _) => format!(" {} ({}) ", index + 1, count_of(*view)),
                (name, true) => format!(" {} {name} ({}) ", index + 1, count_of(*view)),
                (name, false) => format!("{} {name} {} ", index + 1, count_of(*view)),
            })
            .collect()
    };
    let fits = |labels: &[String]| {
        labels.iter().map(|l| l.chars().count() + 1).sum::<usize>() <= area.width as usize
    };
    let candidates = [
        labels(View::tab, true),
        labels(View::short_tab, true),
        labels(View::short_tab, false),
        labels(|_| "", true),
    ];
    let chosen = candidates
        .iter()
        .find(|labels| fits(labels))
        .unwrap_or(&candidates[3]);
    for (view, label) in VIEWS.iter().zip(chosen) {
        let label = label.clone();
        let count = app.total(*view);
        let style = if *view == app.current_view() {
            theme.selection()
        } else if count > 0 && matches!(view, View::Pane(_)) {
            theme.role(Role::Warn)
        } else {
            theme.role(Role::Muted)
        };
        spans.push(Span::styled(label, style));
        spans.push(Span::raw(" "));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)).style(theme.base()), area);
}

pub fn draw_status(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme) {
    let line = match prompt_line(app, theme) {
        Some(line) => line,
        None => status_line(app, area.width as usize, theme),
    };
    frame.render_widget(Paragraph::new(line).style(theme.base()), area);
}

/// The prompt being typed, when one is: an instant, a key to open, or
/// the filter.
fn prompt_line(app: &dyn Shown, theme: &Theme) -> Option<Line<'static>> {
    if let Some(Prompt::Instant(text)) = app.prompt() {
        Some(instant_line(app, text, theme))
    } else if let Some(Prompt::OpenKey(text)) = app.prompt() {
        Some(Line::from(vec![
            Span::styled(":", theme.role(Role::Accent)),
            Span::styled(sanitize_line(text), theme.base()),
            Span::styled("▏", theme.role(Role::Accent)),
            Span::styled(
                "  Enter open this key's detail · Esc keep · C-u clear",
                theme.role(Role::Muted),
            ),
        ]))
    } else if app.editing_filter() {
        let fields: Vec<String> = FILTER_FIELDS.iter().map(|f| format!("{f}:")).collect();
        Some(Line::from(vec![
            Span::styled("/", theme.role(Role::Accent)),
            Span::styled(sanitize_line(app.filter_text()), theme.base()),
            Span::styled("▏", theme.role(Role::Accent)),
            Span::styled(
                format!("  Enter apply · Esc clear · {}", fields.join(" ")),
                theme.role(Role::Muted),
            ),
        ]))
    } else {
        None
    }
}

/// The instant being typed, and what the console travels to.
fn instant_line(app: &dyn Shown, text: &str, theme: &Theme) -> Line<'static> {
    let mut spans = vec![
        Span::styled("⏲ ", theme.role(Role::Accent)),
        Span::styled(sanitize_line(text), theme.base()),
        Span::styled("▏", theme.role(Role::Accent)),
    ];
    // A refused instant says why at once, on the line being typed.
    match app
        .status_now()
        .filter(|status| status.role == Role::Critical)
    {
        Some(problem) => spans.push(Span::styled(
            format!("  ✗ {}", sanitize_line(&problem.text)),
            theme.role(Role::Critical),
        )),
        None => spans.push(Span::styled(
            format!(
                "  now {} · Enter travel · Esc keep · 2026-11-30T13:00:00Z, 2026-11-30, 2h, now",
                app.at()
                    .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                    .unwrap_or_default()
            ),
            theme.role(Role::Muted),
        )),
    }
    Line::from(spans)
}

/// The filter in force, the newest message (else why the last poll
/// failed, else what runs beside the console), and the first-run hint at
/// the right, in `width` columns.
fn status_line(app: &dyn Shown, width: usize, theme: &Theme) -> Line<'static> {
    let mut spans = Vec::new();
    if !app.filter_text().is_empty() {
        spans.push(Span::styled(
            format!("filter: {} │ ", sanitize_line(app.filter_text())),
            theme.role(Role::Accent),
        ));
    }
    let used =
        |spans: &[Span]| -> usize { spans.iter().map(|span| span.content.chars().count()).sum() };
    // The first-run hint stays at the right beside a newer message, as
    // many of its parts as leave the message room to be read.
    let status = app.status_now();
    let hint = match (app.hint(), &status) {
        (Some(hint), Some(status)) if status.text != hint => {
            let room = width.saturating_sub(used(&spans) + 40);
            hint_that_fits(hint, room)
        }
        _ => None,
    };
    let hint_width = hint.as_ref().map_or(0, |hint| hint.chars().count() + 3);
    if let Some(status) = status {
        // The newest message, cut to the line; the log has it whole.
        let room = width.saturating_sub(used(&spans) + hint_width);
        spans.push(Span::styled(
            cut_to(sanitize_line(&status.text), room),
            theme.role(status.role),
        ));
    } else if let Connection::Stale { error, .. } = app.connection() {
        spans.push(Span::styled(
            format!("last poll failed: {}", sanitize_line(error)),
            theme.role(Role::Critical),
        ));
    } else if let Some(background) = app.background() {
        spans.push(Span::styled(
            sanitize_line(background),
            theme.role(Role::Muted),
        ));
    }
    if let Some(hint) = hint {
        let gap = width.saturating_sub(used(&spans) + hint.chars().count());
        spans.push(Span::raw(" ".repeat(gap.max(3))));
        spans.push(Span::styled(sanitize_line(&hint), theme.role(Role::Accent)));
    }
    Line::from(spans)
}

/// A message in `room` columns: cut, and saying where it is whole.
fn cut_to(text: String, room: usize) -> String {
    if text.chars().count() > room {
        let hint = " (M: whole)";
        format!(
            "{}{hint}",
            crate::text::truncate(&text, room.saturating_sub(hint.chars().count()))
        )
    } else {
        text
    }
}

/// The hint, or its first parts (it is written `part · part`, most
/// important first), in `room` columns; None when not even the first fits.
fn hint_that_fits(hint: &str, room: usize) -> Option<String> {
    let parts: Vec<&str> = hint.split(" · ").collect();
    (1..=parts.len())
        .rev()
        .map(|count| parts[..count].join(" · "))
        .find(|head| head.chars().count() <= room)
}

/// The one-line key bar, generated from the action table.
pub fn draw_key_bar(frame: &mut Frame, area: Rect, app: &dyn Shown, theme: &Theme) {
    let view = app.current_view();
    let entries: Vec<KeyBarEntry> = TABLE
        .iter()
        .filter(|entry| entry.in_key_bar || entry.featured_in.contains(&view))
        .filter(|entry| entry.action.allowed(app.is_read_only()))
        .filter(|entry| entry.offered(view, app.at().is_some()))
        .map(|entry| KeyBarEntry {
            keys: entry.keys,
            label: entry.label,
            applies: app.why_not(entry.action).is_none(),
            writes: entry.writes,
        })
        .collect();
    let spans = key_bar_spans(&entries, area.width as usize, theme);
    frame.render_widget(Paragraph::new(Line::from(spans)).style(theme.base()), area);
}

struct KeyBarEntry {
    keys: &'static str,
    label: &'static str,
    /// Nothing in the ledger's rules refuses it for the selection.
    applies: bool,
    writes: bool,
}

/// The key bar's entries as spans within `width`. When they all fit they
/// keep their order, so the bar keeps its shape as the selection moves;
/// when not, the verbs that apply to the selection come first, then the
/// keys that move and show, then what does not apply, and the bar ends
/// with `? more`, since help lists every key.
fn key_bar_spans(entries: &[KeyBarEntry], width: usize, theme: &Theme) -> Vec<Span<'static>> {
    let cells = |keys: &str, label: &str| keys.chars().count() + label.chars().count() + 4;
    let total: usize = entries
        .iter()
        .map(|entry| cells(entry.keys, entry.label))
        .sum();
    let mut shown: Vec<&KeyBarEntry> = entries.iter().collect();
    let mut more = false;
    if total > width {
        more = true;
        // `? more` stands for help.
        shown.retain(|entry| entry.keys != "?");
        shown.sort_by_key(|entry| match (entry.writes, entry.applies) {
            (true, true) => 0,
            (false, _) => 1,
            (true, false) => 2,
        });
        let room = width.saturating_sub(cells("?", "more"));
        let mut used = 0;
        shown.retain(|entry| {
            let needed = cells(entry.keys, entry.label);
            if used + needed <= room {
                used += needed;
                true
            } else {
                false
            }
        });
    }
    let mut spans = Vec::new();
    for KeyBarEntry {
        keys,
        label,
        applies,
        ..
    } in shown
    {
        // Greyed and struck through, not hidden: the bar says the action
        // exists, and that it does not apply to this selection.
        let key_style = if *applies {
            theme.selection()
        } else {
            theme
                .role(Role::Muted)
                .add_modifier(Modifier::CROSSED_OUT | Modifier::DIM)
        };
        spans.push(Span::styled(format!(" {keys} "), key_style));
        spans.push(Span::styled(format!(" {label} "), theme.role(Role::Muted)));
    }
    if more {
        spans.push(Span::styled(" ? ", theme.selection()));
        spans.push(Span::styled(" more ", theme.role(Role::Muted)));
    }
    spans
}
