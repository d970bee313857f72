use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

use crate::console::app::Detail;
use crate::console::model::{state_role, state_symbol};
use crate::console::theme::{Role, Theme};
use crate::format::optional_money;
use crate::ledger::history::{EffectHistory, timeline};
use crate::ledger::model::Effect;
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
    let mut lines = record_lines(history, theme);
    lines.extend(link_lines(detail, history, theme));
    lines.extend(params_and_related_lines(effect, history, theme));
    let events = timeline_lines(history, theme);
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
        let paragraph = Paragraph::new(super::hanging_all(text, column.width as usize))
            .style(theme.base())
            .wrap(Wrap { trim: false })
            .scroll((detail.scroll, 0));
        frame.render_widget(paragraph, column);
    }
}

fn field<'a>(theme: &Theme, name: &str, value: String, role: Role) -> Line<'a> {
    Line::from(vec![
        Span::styled(format!("{name:>14}  "), theme.role(Role::Muted)),
        Span::styled(sanitize_line(&value), theme.role(role)),
    ])
}

/// Every field of the effect itself, its policy and what it may do next.
fn record_lines<'a>(history: &EffectHistory, theme: &Theme) -> Vec<Line<'a>> {
    let effect = &history.effect;
    let mut lines = what_lines(effect, theme);
    if let Some(policy) = &history.policy {
        let state = effect.state.as_str();
        lines.push(field(
            theme,
            "policy",
            format!(
                "{}{}",
                policy.retry_semantics.replace('_', " "),
                if policy.configured { "" } else { " (default)" },
            ),
            Role::Text,
        ));
        lines.push(field(
            theme,
            "next",
            policy.next_step(state).to_string(),
            Role::Accent,
        ));
    }
    lines.extend(when_lines(effect, theme));
    lines.extend(trouble_lines(effect, theme));
    lines
}

/// What the effect is: its state, key, action, target, amount, provider
/// and who asked for it.
fn what_lines<'a>(effect: &Effect, theme: &Theme) -> Vec<Line<'a>> {
    let state = effect.state.as_str();
    vec![
        field(
            theme,
            "state",
            format!("{} {state}", state_symbol(state)),
            state_role(state),
        ),
        field(theme, "key", effect.op_key.clone(), Role::Text),
        field(theme, "action", effect.action.clone(), Role::Text),
        field(theme, "target", effect.target.clone(), Role::Text),
        field(
            theme,
            "amount",
            optional_money(effect.amount_minor, effect.currency.as_deref()),
            Role::Text,
        ),
        field(
            theme,
            "provider",
            effect.provider.clone().unwrap_or_else(|| "—".into()),
            Role::Text,
        ),
        field(theme, "requested by", effect.requester(), Role::Text),
    ]
}

/// Its approval, when it was made and sent, its deadline and the
/// provider's reference.
fn when_lines<'a>(effect: &Effect, theme: &Theme) -> Vec<Line<'a>> {
    let mut lines = Vec::new();
    if let Some(approval) = &effect.approval_ref {
        lines.push(field(
            theme,
            "approval",
            format!("{approval} v{}", effect.approval_version.unwrap_or(0)),
            Role::Text,
        ));
    }
    lines.push(field(
        theme,
        "created",
        effect.created_at.to_rfc3339(),
        Role::Muted,
    ));
    lines.push(field(
        theme,
        "dispatched",
        match &effect.dispatched_at {
            Some(at) => format!("{} by {}", at.to_rfc3339(), effect.dispatcher()),
            None => "○ not yet (prepared)".into(),
        },
        Role::Text,
    ));
    lines.push(field(
        theme,
        "deadline",
        effect
            .deadline_at
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|| "—".into()),
        Role::Text,
    ));
    lines.push(field(
        theme,
        "external ref",
        effect.external_ref.clone().unwrap_or_else(|| "—".into()),
        Role::Text,
    ));
    lines
}

/// What went wrong: its failure, a result after settlement, what the
/// provider needs a person for.
fn trouble_lines<'a>(effect: &Effect, theme: &Theme) -> Vec<Line<'a>> {
    let mut lines = Vec::new();
    if let Some(error) = effect.last_error() {
        lines.push(field(
            theme,
            "failure",
            format!("{error} (retryable: {})", effect.retryable.unwrap_or(false)),
            Role::Critical,
        ));
    }
    if let Some(at) = effect.late_result_at {
        lines.push(field(
            theme,
            "late result",
            format!("⚑ a result arrived after settlement, {}", at.to_rfc3339()),
            Role::Critical,
        ));
    }
    if let Some(attention) = &effect.attention {
        lines.push(field(
            theme,
            "attention",
            format!("⚑ {attention} at the provider: escalate or compensate"),
            Role::Critical,
        ));
    }
    lines
}

/// Where the responder came from, the effects this one is tied to (the
/// highlighted one opens with Enter) and the requests to compensate it.
fn link_lines<'a>(detail: &Detail, history: &EffectHistory, theme: &Theme) -> Vec<Line<'a>> {
    let mut lines = Vec::new();
    if let Some(from) = detail.trail.last() {
        lines.push(field(
            theme,
            "came from",
            format!("{from} (Esc)"),
            Role::Muted,
        ));
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
        lines.push(field(theme, "compensation", request.describe(), Role::Warn));
    }
    for owed in history
        .next_steps
        .iter()
        .filter(|owed| owed.done_at.is_none())
    {
        lines.push(field(theme, "next step", owed.describe(), Role::Warn));
    }
    lines
}

fn params_and_related_lines<'a>(
    effect: &Effect,
    history: &EffectHistory,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let mut lines = Vec::new();
    lines.push(field(
        theme,
        "version",
        effect.version.to_string(),
        Role::Muted,
    ));
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
    lines
}

/// Attempts, state changes, reconciliations, deliveries and audit entries in one time order.
fn timeline_lines<'a>(history: &EffectHistory, theme: &Theme) -> Vec<Line<'a>> {
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
    events
}
