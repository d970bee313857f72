//! `effectwatch check`: one line for cron and monitoring systems, with the
//! exit codes they expect: 0 within thresholds, 1 a threshold exceeded,
//! 2 cannot tell (database unreachable, schema missing, any other error).
//! `--format prometheus` prints the text exposition of the same figures.

use std::fmt::Write as _;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::exit::Failure;
use super::report::write_output;
use crate::format::duration_ms;
use crate::ledger::check::{self, Breach, Health, Thresholds};
use crate::ledger::{self, ConnectSettings, LedgerError};
use crate::text::{safe_json, sanitize_line};
use crate::time_args::parse_duration;

pub const EXCEEDED: u8 = 1;
pub const CANNOT_TELL: u8 = 2;

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Fail when more effects than this are overdue.
    #[arg(long, value_name = "N")]
    pub max_overdue: Option<i64>,
    /// Fail when more effects than this have an unknown outcome.
    #[arg(long, value_name = "N")]
    pub max_unknown: Option<i64>,
    /// Fail when more keys than this have duplicate attempts (the pane keeps them for good).
    #[arg(long, value_name = "N")]
    pub max_duplicates: Option<i64>,
    /// Fail when more effects than this are held.
    #[arg(long, value_name = "N")]
    pub max_held: Option<i64>,
    /// Fail when more escalations than this are unresolved.
    #[arg(long, value_name = "N")]
    pub max_escalations: Option<i64>,
    /// Fail when more effects than this are suspected double effects (reads every succeeded effect).
    #[arg(long, value_name = "N")]
    pub max_suspected: Option<i64>,
    /// Fail when the oldest overdue, unknown, held or escalated item is older than this (e.g. 30m).
    #[arg(long, value_name = "AGE", value_parser = parse_duration)]
    pub max_age: Option<Duration>,
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,
    /// Seconds to wait for the database before answering "cannot tell".
    #[arg(long, default_value_t = 5, value_name = "SECONDS")]
    pub timeout: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckFormat {
    Text,
    Json,
    Prometheus,
}

impl CheckArgs {
    fn thresholds(&self) -> Thresholds {
        Thresholds {
            max_overdue: self.max_overdue,
            max_unknown: self.max_unknown,
            max_duplicates: self.max_duplicates,
            max_held: self.max_held,
            max_escalations: self.max_escalations,
            max_suspected: self.max_suspected,
            max_age: self.max_age,
        }
    }
}

#[derive(Debug, Serialize)]
struct Verdict<'a> {
    status: &'static str,
    summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<&'a Health>,
    breaches: &'a [Breach],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Every failure here is "cannot tell" (2), so it connects by itself rather
/// than through the shared connect-then-dispatch path.
pub async fn run(database_url: Option<String>, args: CheckArgs) -> Result<(), Failure> {
    let thresholds = args.thresholds();
    let measured = match database_url {
        None => Err(LedgerError::BadUrl(
            "no database given: pass --database-url, set DATABASE_URL, or set database_url in the config file"
                .to_string(),
        )),
        Some(url) => measure(url, &args).await,
    };
    let (health, breaches, error) = match measured {
        Ok(health) => {
            let breaches = check::evaluate(&health, &thresholds);
            (Some(health), breaches, None)
        }
        Err(error) => (None, Vec::new(), Some(error.to_string())),
    };
    let (status, code) = match (&error, breaches.is_empty()) {
        (Some(_), _) => ("unknown", CANNOT_TELL),
        (None, true) => ("ok", 0),
        (None, false) => ("exceeded", EXCEEDED),
    };
    let summary = summary_line(status, health.as_ref(), &breaches, error.as_deref());
    let verdict = Verdict {
        status,
        summary: summary.clone(),
        health: health.as_ref(),
        breaches: &breaches,
        error: error.clone(),
    };
    let text = match args.format {
        CheckFormat::Text => format!("{summary}\n"),
        CheckFormat::Json => safe_json(&verdict) + "\n",
        CheckFormat::Prometheus => prometheus(health.as_ref(), &breaches),
    };
    write_output(None, text.as_bytes())?;
    match code {
        0 => Ok(()),
        // The verdict is on stdout, where a monitoring system reads it: once.
        _ => Err(Failure::already_said(code)),
    }
}

async fn measure(url: String, args: &CheckArgs) -> Result<Health, LedgerError> {
    let mut settings = ConnectSettings::new(url);
    settings.application_name = "effectwatch:check".to_string();
    settings.connect_timeout = Duration::from_secs(args.timeout.max(1));
    settings.statement_timeout = Duration::from_secs(args.timeout.max(1) * 2);
    settings.max_connections = 1;
    let pool = ledger::connect(&settings).await?;
    let health = check::measure(&pool, args.max_suspected.is_some()).await;
    pool.close().await;
    health
}

fn summary_line(
    status: &str,
    health: Option<&Health>,
    breaches: &[Breach],
    error: Option<&str>,
) -> String {
    let mut line = match status {
        "ok" => "OK".to_string(),
        "exceeded" => "CRITICAL".to_string(),
        _ => "UNKNOWN".to_string(),
    };
    if let Some(error) = error {
        let _ = write!(line, ": cannot tell: {}", sanitize_line(error));
        return line;
    }
    if !breaches.is_empty() {
        let exceeded: Vec<String> = breaches
            .iter()
            .map(|b| match b.unit {
                "ms" => format!(
                    "{} {} > {}",
                    b.what,
                    duration_ms(b.value),
                    duration_ms(b.limit)
                ),
                _ => format!("{} {} > {}", b.what, b.value, b.limit),
            })
            .collect();
        let _ = write!(line, ": {};", exceeded.join(", "));
    } else {
        line.push(':');
    }
    if let Some(health) = health {
        let figures: Vec<String> = health
            .panes
            .iter()
            .map(|count| match count.oldest_ms {
                Some(oldest) if count.items > 0 => {
                    format!(
                        "{} {} (oldest {})",
                        count.pane,
                        count.items,
                        duration_ms(oldest)
                    )
                }
                _ => format!("{} {}", count.pane, count.items),
            })
            .collect();
        let _ = write!(line, " {}", figures.join(", "));
        if let Some(suspected) = health.suspected {
            let _ = write!(line, ", suspected double effects {suspected}");
        }
    }
    line
}

/// Prometheus text exposition (version 0.0.4).
pub fn prometheus(health: Option<&Health>, breaches: &[Breach]) -> String {
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    gauge(
        "effectwatch_up",
        "Whether the ledger could be read (1) or not (0).",
        &[(String::new(), if health.is_some() { 1.0 } else { 0.0 })],
    );
    if let Some(health) = health {
        let label = |pane: &str| format!("{{pane=\"{pane}\"}}");
        gauge(
            "effectwatch_pane_items",
            "Items in each pane of the effect ledger.",
            &health
                .panes
                .iter()
                .map(|c| (label(&c.pane), c.items as f64))
                .collect::<Vec<_>>(),
        );
        gauge(
            "effectwatch_pane_oldest_seconds",
            "Age of the oldest item in each pane, in seconds; 0 when the pane is empty.",
            &health
                .panes
                .iter()
                .map(|c| (label(&c.pane), c.oldest_ms.unwrap_or(0) as f64 / 1000.0))
                .collect::<Vec<_>>(),
        );
        if let Some(suspected) = health.suspected {
            gauge(
                "effectwatch_suspected_double_effects",
                "Succeeded effects that are part of a suspected double effect.",
                &[(String::new(), suspected as f64)],
            );
        }
        gauge(
            "effectwatch_ledger_weak_triggers",
            "Ledger triggers that do not fire in every session mode (must be 0).",
            &[(String::new(), health.weak_triggers.len() as f64)],
        );
        gauge(
            "effectwatch_check_thresholds_exceeded",
            "Thresholds of this check that the ledger exceeds.",
            &[(String::new(), breaches.len() as f64)],
        );
    }
    out
}
