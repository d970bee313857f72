use crate::ledger::LedgerPool;

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
    let effect = &history.effect;
    let mut out = String::new();
    let mut field = |name: &str, value: String| {
        out.push_str(&format!("{name:>14}  {}\n", sanitize_line(&value)));
    };
    field("key", effect.op_key.clone());
    field("state", effect.state.to_string());
    field("action", effect.action.clone());
    field("target", effect.target.clone());
    field(
        "amount",
        optional_money(effect.amount_minor, effect.currency.as_deref()),
    );
    field(
        "provider",
        effect.provider.clone().unwrap_or_else(|| "—".into()),
    );
    field("requested by", effect.requester());
    field("created", effect.created_at.to_rfc3339());
    field(
        "dispatched",
        match effect.dispatched_at {
            Some(at) => format!("{} by {}", at.to_rfc3339(), effect.dispatcher()),
            None => "not yet".into(),
        },
    );
    field(
        "deadline",
        effect
            .deadline_at
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|| "—".into()),
    );
    field(
        "external ref",
        effect.external_ref.clone().unwrap_or_else(|| "—".into()),
    );
    if let Some(error) = effect.last_error() {
        field(
            "failure",
            format!("{error} (retryable: {})", effect.retryable.unwrap_or(false)),
        );
    }
    if let Some(at) = effect.late_result_at {
        field("late result", format!("⚑ received {}", at.to_rfc3339()));
    }
    if let Some(attention) = &effect.attention {
        field(
            "attention",
            format!("⚑ {attention}: escalate or compensate"),
        );
    }
    if let Some(approval) = &effect.approval_ref {
        field(
            "approval",
            format!("{approval} v{}", effect.approval_version.unwrap_or(0)),
        );
    }
    if let Some(policy) = &history.policy {
        field("next", policy.next_step(effect.state.as_str()).to_string());
    }
    for link in &history.links {
        field(&link.relation, format!("{} ({})", link.op_key, link.state));
    }
    for request in &history.compensation_requests {
        field("compensation", request.describe());
    }
    for owed in history
        .next_steps
        .iter()
        .filter(|owed| owed.done_at.is_none())
    {
        field("next step", owed.describe());
    }
    field("version", effect.version.to_string());
    let params = serde_json::to_string_pretty(&effect.params).unwrap_or_default();
    out.push_str("        params\n");
    for line in sanitize(&params).lines() {
        out.push_str(&format!("                {line}\n"));
    }
    out.push_str("\ntimeline\n");
    for entry in timeline(history) {
        out.push_str(&format!(
            "  {}  {:<9}  {}\n",
            entry.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            entry.kind,
            sanitize_line(&entry.text)
        ));
    }
    if !history.related.is_empty() {
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
    out
}
