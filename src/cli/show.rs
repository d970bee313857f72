use crate::ledger::{Effect, LedgerPool};

use super::Format;
use super::exit::Failure;
use crate::format::optional_money;
use crate::ledger::history::{self, EffectHistory, timeline};
use crate::text::{safe_json, sanitize, sanitize_line};

pub async fn run(pool: &LedgerPool, op_key: &str, format: Format) -> Result<(), Failure> {
    let history = history::load(pool, op_key).await?;
    match format {
        Format::Json => println!("{}", safe_json(&history)),
        Format::Table => print!("{}", render(&history)),
    }
    Ok(())
}

pub fn render(history: &EffectHistory) -> String {
    let mut out = String::new();
    for (name, value) in fields(history) {
        out.push_str(&format!("{name:>14}  {}\n", sanitize_line(&value)));
    }
    render_params(&mut out, &history.effect);
    render_timeline(&mut out, history);
    render_related(&mut out, history);
    out
}

/// The named lines at the top, in the order shown: the effect's own, then
/// what it is tied to and owes, then its version.
fn fields(history: &EffectHistory) -> Vec<(&str, String)> {
    let effect = &history.effect;
    let mut fields = effect_fields(effect);
    if let Some(policy) = &history.policy {
        fields.push(("next", policy.next_step(effect.state.as_str()).to_string()));
    }
    for link in &history.links {
        fields.push((&link.relation, format!("{} ({})", link.op_key, link.state)));
    }
    for request in &history.compensation_requests {
        fields.push(("compensation", request.describe()));
    }
    for owed in history
        .next_steps
        .iter()
        .filter(|owed| owed.done_at.is_none())
    {
        fields.push(("next step", owed.describe()));
    }
    fields.push(("version", effect.version.to_string()));
    fields
}

fn effect_fields(effect: &Effect) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("key", effect.op_key.clone()),
        ("state", effect.state.to_string()),
        ("action", effect.action.clone()),
        ("target", effect.target.clone()),
        (
            "amount",
            optional_money(effect.amount_minor, effect.currency.as_deref()),
        ),
        (
            "provider",
            effect.provider.clone().unwrap_or_else(|| "—".into()),
        ),
        ("requested by", effect.requester()),
        ("created", effect.created_at.to_rfc3339()),
        (
            "dispatched",
            match effect.dispatched_at {
                Some(at) => format!("{} by {}", at.to_rfc3339(), effect.dispatcher()),
                None => "not yet".into(),
            },
        ),
        (
            "deadline",
            effect
                .deadline_at
                .map(|t| t.to_rfc3339())
                .unwrap_or_else(|| "—".into()),
        ),
        (
            "external ref",
            effect.external_ref.clone().unwrap_or_else(|| "—".into()),
        ),
    ];
    if let Some(error) = effect.last_error() {
        fields.push((
            "failure",
            format!("{error} (retryable: {})", effect.retryable.unwrap_or(false)),
        ));
    }
    if let Some(at) = effect.late_result_at {
        fields.push(("late result", format!("⚑ received {}", at.to_rfc3339())));
    }
    if let Some(attention) = &effect.attention {
        fields.push((
            "attention",
            format!("⚑ {attention}: escalate or compensate"),
        ));
    }
    if let Some(approval) = &effect.approval_ref {
        fields.push((
            "approval",
            format!("{approval} v{}", effect.approval_version.unwrap_or(0)),
        ));
    }
    fields
}

fn render_params(out: &mut String, effect: &Effect) {
    let params = serde_json::to_string_pretty(&effect.params).unwrap_or_default();
    out.push_str("        params\n");
    for line in sanitize(&params).lines() {
        out.push_str(&format!("                {line}\n"));
    }
}

fn render_timeline(out: &mut String, history: &EffectHistory) {
    out.push_str("\ntimeline\n");
    for entry in timeline(history) {
        out.push_str(&format!(
            "  {}  {:<9}  {}\n",
            entry.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            entry.kind,
            sanitize_line(&entry.text)
        ));
    }
}

fn render_related(out: &mut String, history: &EffectHistory) {
    if history.related.is_empty() {
        return;
    }
    out.push_str("\nother effects on this target\n");
    for related in &history.related {
        out.push_str(&format!(
            "  {:<11} {}  {}\n",
            related.state.as_str(),
            sanitize_line(&related.op_key),
            optional_money(related.amount_minor, related.currency.as_deref())
        ));
    }
}
