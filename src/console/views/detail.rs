use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

use crate::console::app::Detail;
use crate::console::model::{state_role, state_symbol};
use crate::console::theme::{Role, Theme};
use crate::format::optional_money;
use crate::ledger::history::timeline;
use crate::text::{sanitize, sanitize_line};

/// Every field of one effect, its params, and one merged timeline. Values
/// are shown whole (wrapped), unlike the tables, which truncate.
pub fn draw(frame: &mut Frame, area: Rect, detail: &Detail, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(theme.border())
        .title(Span::styled(
            format!(" Effect {} ", sanitize_line(&detail.op_key)),
            theme.role(Role::Accent).add_modifier(Modifier::BOLD),
        ))
        .title_bottom(
            Line::from(match detail.history.as_ref().map_or(0, |h| h.links.len()) {
                0 => " Esc back · ↑↓ scroll ",
                _ => " n next link · Enter open it · Esc back · ↑↓ scroll ",
            })
            .right_aligned(),
        );
    let Some(history) = &detail.history else {
        let text = match &detail.error {
            Some(error) => format!("✗ {}", sanitize_line(error)),
            None => "loading…".to_string(),
        };
        frame.render_widget(
            Paragraph::new(text)
                .style(theme.role(Role::Muted))
                .block(block),
            area,
        );
        return;
    };
    let effect = &history.effect;
    let mut lines: Vec<Line> = Vec::new();
    let field = |name: &str, value: String, role: Role| {
        Line::from(vec![
            Span::styled(format!("{name:>14}  "), theme.role(Role::Muted)),
            Span::styled(sanitize_line(&value), theme.role(role)),
        ])
    };
    let state = effect.state.as_str();
    lines.push(field(
        "state",
        format!("{} {state}", state_symbol(state)),
        state_role(state),
    ));
    lines.push(field("key", effect.op_key.clone(), Role::Text));
    lines.push(field("action", effect.action.clone(), Role::Text));
    lines.push(field("target", effect.target.clone(), Role::Text));
    lines.push(field(
        "amount",
        optional_money(effect.amount_minor, effect.currency.as_deref()),
        Role::Text,
    ));
    lines.push(field(
        "provider",
        effect.provider.clone().unwrap_or_else(|| "—".into()),
        Role::Text,
    ));
    lines.push(field("requested by", effect.requester(), Role::Text));
    if let Some(policy) = &history.policy {
        lines.push(field(
            "policy",
            format!(
                "{}{}",
                policy.retry_semantics.replace('_', " "),
                if policy.configured { "" } else { " (default)" },
            ),
            Role::Text,
        ));
        lines.push(field(
            "next",
            policy.next_step(state).to_string(),
            Role::Accent,
        ));
    }
    if let Some(approval) = &effect.approval_ref {
        lines.push(field(
            "approval",
            format!("{approval} v{}", effect.approval_version.unwrap_or(0)),
            Role::Text,
        ));
    }
    lines.push(field(
        "created",
        effect.created_at.to_rfc3339(),
        Role::Muted,
    ));
    lines.push(field(
        "dispatched",
        match &effect.dispatched_at {
            Some(at) => format!("{} by {}", at.to_rfc3339(), effect.dispatcher()),
            None => "○ not yet (prepared)".into(),
        },
        Role::Text,
    ));
    lines.push(field(
        "deadline",
        effect
            .deadline_at
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|| "—".into()),
        Role::Text,
    ));
    lines.push(field(
        "external ref",
        effect.external_ref.clone().unwrap_or_else(|| "—".into()),
        Role::Text,
    ));
    if let Some(reason) = &effect.failure_reason {
        lines.push(field(
            "failure",
            format!(
                "{reason} (retryable: {})",
                effect.retryable.unwrap_or(false)
            ),
            Role::Critical,
        ));
    }
    if let Some(at) = effect.late_result_at {
        lines.push(field(
            "late result",
            format!("⚑ a result arrived after settlement, {}", at.to_rfc3339()),
            Role::Critical,
        ));
    }
    if let Some(attention) = &effect.attention {
        lines.push(field(
            "attention",
            format!("⚑ {attention} at the provider: escalate or compensate"),
            Role::Critical,
        ));
    }
    if let Some(from) = detail.trail.last() {
        lines.push(field("came from", format!("{from} (Esc)"), Role::Muted));
    }
    for (index, link) in history.links.iter().enumerate() {
        let state = link.state.as_str();
        let selected = index == detail.link;
        let key_style = if selected {
            theme.selection()
        } else {
            theme.role(Role::Text)
        };
        lines.push(Line::from(vec![
            Span::styled(format!("{:>14}  ", link.relation), theme.role(Role::Muted)),
            Span::styled(
                format!("{} ", state_symbol(state)),
                theme.role(state_role(state)),
            ),
            Span::styled(sanitize_line(&link.op_key), key_style),
            Span::styled(
                if selected { "  ⏎ open" } else { "" },
                theme.role(Role::Accent),
            ),
        ]));
    }
    for request in &history.compensation_requests {
        lines.push(field("compensation", request.describe(), Role::Warn));
    }
    lines.push(field("version", effect.version.to_string(), Role::Muted));
    lines.push(Line::from(Span::styled(
        "        params",
        theme.role(Role::Muted),
    )));
    let params = serde_json::to_string_pretty(&effect.params).unwrap_or_default();
    for line in sanitize(&params).lines() {
        lines.push(Line::from(Span::styled(
            format!("                {line}"),
            theme.base(),
        )));
    }
    if !history.related.is_empty() {
        lines.push(Line::default());
        lines.push(Line::from(Span::styled(
            "other effects on this target",
            theme.role(Role::Accent).add_modifier(Modifier::BOLD),
        )));
        for related in &history.related {
            let state = related.state.as_str();
            lines.push(Line::from(vec![
                Span::styled(
                    format!("  {} {state:<11} ", state_symbol(state)),
                    theme.role(state_role(state)),
                ),
                Span::styled(sanitize_line(&related.op_key), theme.base()),
                Span::styled(
                    format!(
                        "  {}",
                        optional_money(related.amount_minor, related.currency.as_deref())
                    ),
                    theme.role(Role::Muted),
                ),
            ]));
        }
    }
    let mut events: Vec<Line> = vec![Line::from(Span::styled(
        "timeline",
        theme.role(Role::Accent).add_modifier(Modifier::BOLD),
    ))];
    for entry in timeline(history) {
        let role = match entry.kind {
            "state" => Role::Text,
            "reconcile" | "audit" => Role::Accent,
            "escalate" => Role::Warn,
            _ if entry.text.contains('⚑') || entry.text.starts_with("mismatch") => Role::Critical,
            _ => Role::Muted,
        };
        events.push(Line::from(vec![
            Span::styled(
                format!("  {} ", entry.at.format("%m-%d %H:%M:%S%.3f")),
                theme.role(Role::Muted),
            ),
            Span::styled(format!("{:<9} ", entry.kind), theme.role(Role::Muted)),
            Span::styled(sanitize_line(&entry.text), theme.role(role)),
        ]));
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);
    // Wide terminals show the record and its timeline side by side: the
    // timeline is what a responder reads, and it should not be below the fold.
    let columns: Vec<(Rect, Vec<Line>)> = if inner.width >= 130 {
        let [left, right] = Layout::horizontal([Constraint::Length(62), Constraint::Min(40)])
            .spacing(2)
            .areas(inner);
        vec![(left, lines), (right, events)]
    } else {
        lines.push(Line::default());
        lines.extend(events);
        vec![(inner, lines)]
    };
    for (column, text) in columns {
        let paragraph = Paragraph::new(text)
            .style(theme.base())
            .wrap(Wrap { trim: false })
            .scroll((detail.scroll, 0));
        frame.render_widget(paragraph, column);
    }
}
