//! `effectwatch check`: one line in the monitoring-plugin convention that
//! Nagios, Icinga and Sensu run — exit 0 OK, 1 WARNING, 2 CRITICAL,
//! 3 UNKNOWN (database unreachable, schema missing, any other error) — with
//! a warning and a critical threshold per figure and performance data after
//! the `|`. `--format json` and `--format prometheus` carry the same figures.

use std::fmt::Write as _;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::exit::Failure;
use super::report::write_output;
use crate::format::duration_ms;
pub mod health;

use crate::ledger::{self, ConnectSettings, LedgerError};
use crate::text::{safe_json, sanitize_line};
use crate::time_args::parse_duration;
use health::{self as check, AGED_PANES, Breach, Health, Level, Limits, Thresholds};

pub const WARNING: u8 = 1;
pub const CRITICAL: u8 = 2;
pub const UNKNOWN: u8 = 3;

/// Each figure is WARNING above its `--warn-…` and CRITICAL above its
/// `--crit-…`; `--max-…` is the older name of `--crit-…`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// WARNING when more effects than this are overdue.
    #[arg(long, value_name = "N", help_heading = "Thresholds")]
    pub warn_overdue: Option<i64>,
    /// CRITICAL when more effects than this are overdue.
    #[arg(
        long,
        value_name = "N",
        alias = "max-overdue",
        help_heading = "Thresholds"
    )]
    pub crit_overdue: Option<i64>,
    /// WARNING when more effects than this have an unknown outcome.
    #[arg(long, value_name = "N", help_heading = "Thresholds")]
    pub warn_unknown: Option<i64>,
    /// CRITICAL when more effects than this have an unknown outcome.
    #[arg(
        long,
        value_name = "N",
        alias = "max-unknown",
        help_heading = "Thresholds"
    )]
    pub crit_unknown: Option<i64>,
    /// WARNING when more keys than this have duplicate attempts.
    #[arg(long, value_name = "N", help_heading = "Thresholds")]
    pub warn_duplicates: Option<i64>,
    /// CRITICAL when more keys than this have duplicate attempts.
    #[arg(
        long,
        value_name = "N",
        alias = "max-duplicates",
        help_heading = "Thresholds"
    )]
    pub crit_duplicates: Option<i64>,
    /// WARNING when more effects than this are held.
    #[arg(long, value_name = "N", help_heading = "Thresholds")]
    pub warn_held: Option<i64>,
    /// CRITICAL when more effects than this are held.
    #[arg(
        long,
        value_name = "N",
        alias = "max-held",
        help_heading = "Thresholds"
    )]
    pub crit_held: Option<i64>,
    /// WARNING when more escalations than this are unresolved.
    #[arg(long, value_name = "N", help_heading = "Thresholds")]
    pub warn_escalations: Option<i64>,
    /// CRITICAL when more escalations than this are unresolved.
    #[arg(
        long,
        value_name = "N",
        alias = "max-escalations",
        help_heading = "Thresholds"
    )]
    pub crit_escalations: Option<i64>,
    /// WARNING when more effects than this are suspected double effects (reads every succeeded effect).
    #[arg(long, value_name = "N", help_heading = "Thresholds")]
    pub warn_suspected: Option<i64>,
    /// CRITICAL when more effects than this are suspected double effects.
    #[arg(
        long,
        value_name = "N",
        alias = "max-suspected",
        help_heading = "Thresholds"
    )]
    pub crit_suspected: Option<i64>,
    /// WARNING when the oldest overdue, unknown, held or escalated item is older than this (e.g. 30m).
    #[arg(long, value_name = "AGE", value_parser = parse_duration, help_heading = "Thresholds")]
    pub warn_age: Option<Duration>,
    /// CRITICAL when the oldest overdue, unknown, held or escalated item is older than this.
    #[arg(long, value_name = "AGE", value_parser = parse_duration, alias = "max-age", help_heading = "Thresholds")]
    pub crit_age: Option<Duration>,
    /// Judge only by the thresholds given here: without it, each figure not
    /// given has its default (overdue 20/100, unknown 10/50, held 50/200,
    /// escalations 10/50, oldest item 30m/2h; duplicates and suspected none).
    #[arg(long, help_heading = "Thresholds")]
    pub no_default_thresholds: bool,
    /// Also judge whether acknowledged ledger writes survive a failover
    /// (synchronous_commit, synchronous standbys named and connected):
    /// WARNING when a failover can lose them, CRITICAL when a crash can.
    #[arg(long)]
    pub durability: bool,
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,
    /// Seconds to wait for the database before answering UNKNOWN.
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
        // A check with no flags still says when the ledger needs people.
        let defaults = !self.no_default_thresholds;
        // A figure with either limit given is judged by what was given alone.
        let limits = |warning: Option<i64>, critical: Option<i64>, default: Option<(i64, i64)>| {
            match default.filter(|_| defaults && warning.is_none() && critical.is_none()) {
                Some((warning, critical)) => Limits {
                    warning: Some(warning),
                    critical: Some(critical),
                },
                None => Limits { warning, critical },
            }
        };
        let millis = |age: Option<Duration>| {
            age.map(|age| i64::try_from(age.as_millis()).unwrap_or(i64::MAX))
        };
        const MINUTE: i64 = 60_000;
        Thresholds {
            overdue: limits(self.warn_overdue, self.crit_overdue, Some((20, 100))),
            unknown: limits(self.warn_unknown, self.crit_unknown, Some((10, 50))),
            duplicates: limits(self.warn_duplicates, self.crit_duplicates, None),
            held: limits(self.warn_held, self.crit_held, Some((50, 200))),
            escalations: limits(self.warn_escalations, self.crit_escalations, Some((10, 50))),
            suspected: limits(self.warn_suspected, self.crit_suspected, None),
            age_ms: limits(
                millis(self.warn_age),
                millis(self.crit_age),
                Some((30 * MINUTE, 120 * MINUTE)),
            ),
        }
    }
}

/// The verdict's word and exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Warning,
    Critical,
    Unknown,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warning => "WARNING",
            Status::Critical => "CRITICAL",
            Status::Unknown => "UNKNOWN",
        }
    }

    fn code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Warning => WARNING,
            Status::Critical => CRITICAL,
            Status::Unknown => UNKNOWN,
        }
    }
}

#[derive(Debug, Serialize)]
struct Verdict<'a> {
    /// ok, warning, critical or unknown.
    status: String,
    summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<&'a Health>,
    breaches: &'a [Breach],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Every failure here is UNKNOWN (3), so it connects by itself rather
/// than through the shared connect-then-dispatch path.
pub async fn run(database_url: Option<String>, args: CheckArgs) -> Result<(), Failure> {
    let thresholds = args.thresholds();
    let measured = match database_url {
        None => Err(LedgerError::BadUrl(
            "no database given: pass --database-url, set DATABASE_URL, or set database_url in the config file"
                .to_string(),
        )),
        Some(url) => measure(url, &args, thresholds.suspected.is_set()).await,
    };
    let (health, breaches, error) = match measured {
        Ok(health) => {
            let breaches = check::evaluate(&health, &thresholds);
            (Some(health), breaches, None)
        }
        Err(error) => (None, Vec::new(), Some(error.to_string())),
    };
    let status = match (&error, check::worst(&breaches)) {
        (Some(_), _) => Status::Unknown,
        (None, None) => Status::Ok,
        (None, Some(Level::Warning)) => Status::Warning,
        (None, Some(Level::Critical)) => Status::Critical,
    };
    let summary = summary_line(status, health.as_ref(), &breaches, error.as_deref());
    let text = match args.format {
        CheckFormat::Text => match &health {
            Some(health) => format!("{summary} | {}\n", performance_data(health, &thresholds)),
            None => format!("{summary}\n"),
        },
        CheckFormat::Json => {
            let verdict = Verdict {
                status: status.word().to_lowercase(),
                summary,
                health: health.as_ref(),
                breaches: &breaches,
                error,
            };
            safe_json(&verdict) + "\n"
        }
        CheckFormat::Prometheus => prometheus(health.as_ref(), &breaches),
    };
    write_output(None, text.as_bytes())?;
    match status.code() {
        0 => Ok(()),
        // The verdict is on stdout, where a monitoring system reads it: once.
        code => Err(Failure::already_said(code)),
    }
}

async fn measure(
    url: String,
    args: &CheckArgs,
    with_suspected: bool,
) -> Result<Health, LedgerError> {
    let mut settings = ConnectSettings::new(url);
    settings.application_name = "effectwatch:check".to_string();
    settings.connect_timeout = Duration::from_secs(args.timeout.max(1));
    settings.statement_timeout = Duration::from_secs(args.timeout.max(1) * 2);
    settings.max_connections = 1;
    let pool = ledger::connect(&settings).await?;
    let health = check::measure(&pool, with_suspected, args.durability).await;
    pool.close().await;
    health
}

/// `EFFECTWATCH CRITICAL - unknown 12 > 10; overdue 3 > 2 (warning)`: what
/// is over its limit, worst first; when nothing is, every pane's figure.
fn summary_line(
    status: Status,
    health: Option<&Health>,
    breaches: &[Breach],
    error: Option<&str>,
) -> String {
    let mut line = format!("EFFECTWATCH {} - ", status.word());
    if let Some(error) = error {
        let _ = write!(line, "cannot tell: {}", sanitize_line(error));
        return line;
    }
    if !breaches.is_empty() {
        let mut worst_first: Vec<&Breach> = breaches.iter().collect();
        worst_first.sort_by_key(|breach| std::cmp::Reverse(breach.level));
        let over: Vec<String> = worst_first
            .iter()
            .map(|b| {
                let mark = match (status, b.level) {
                    (Status::Critical, Level::Warning) => " (warning)",
                    _ => "",
                };
                match b.unit {
                    "durability" | "schema" => format!("{}{mark}", b.what),
                    "ms" => format!(
                        "{} {} > {}{mark}",
                        b.what,
                        duration_ms(b.value),
                        duration_ms(b.limit)
                    ),
                    _ => format!("{} {} > {}{mark}", b.what, b.value, b.limit),
                }
            })
            .collect();
        line.push_str(&over.join("; "));
        return line;
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
        line.push_str(&figures.join(", "));
        if let Some(suspected) = health.suspected {
            let _ = write!(line, ", suspected double effects {suspected}");
        }
        if let Some(durability) = &health.durability {
            let _ = write!(line, "; failover-safe: {}", durability.verdict().sentence);
        }
    }
    line
}

/// Performance data as monitoring plugins write it,
/// `label=value[unit];warn;crit`: every pane's items, the age of the oldest
/// item of the aged panes in seconds, suspected doubles when measured.
fn performance_data(health: &Health, thresholds: &Thresholds) -> String {
    fn figure(label: &str, value: String, unit: &str, limits: Limits, scale: f64) -> String {
        let limit = |limit: Option<i64>| {
            limit.map_or(String::new(), |limit| (limit as f64 / scale).to_string())
        };
        if limits.is_set() {
            format!(
                "{label}={value}{unit};{};{}",
                limit(limits.warning),
                limit(limits.critical)
            )
        } else {
            format!("{label}={value}{unit}")
        }
    }
    let mut figures: Vec<String> = health
        .panes
        .iter()
        .map(|count| {
            figure(
                &count.pane,
                count.items.to_string(),
                "",
                thresholds.of_pane(&count.pane),
                1.0,
            )
        })
        .collect();
    for pane in AGED_PANES {
        let seconds = health.oldest_ms(pane).unwrap_or(0) as f64 / 1000.0;
        figures.push(figure(
            &format!("oldest_{pane}"),
            seconds.to_string(),
            "s",
            thresholds.age_ms,
            1000.0,
        ));
    }
    if let Some(suspected) = health.suspected {
        figures.push(figure(
            "suspected",
            suspected.to_string(),
            "",
            thresholds.suspected,
            1.0,
        ));
    }
    if let Some(durability) = &health.durability {
        let synchronous = durability.verdict().synchronous_standbys;
        figures.push(format!("synchronous_standbys={synchronous};1:;1:"));
    }
    figures.push(format!("weak_triggers={};;0", health.weak_triggers.len()));
    figures.push(format!("steps_owed={}", health.steps_owed));
    figures.push(format!("unowned_work={};0", health.unowned_work.len()));
    figures.join(" ")
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
            "effectwatch_next_steps_owed",
            "Steps of settling flows recorded as owed and not yet taken by a reconciler.",
            &[(String::new(), health.steps_owed as f64)],
        );
        gauge(
            "effectwatch_unowned_work",
            "Flagged effects and unsent compensations with no next step and no person told (must be 0).",
            &[(String::new(), health.unowned_work.len() as f64)],
        );
        gauge(
            "effectwatch_check_thresholds_exceeded",
            "Thresholds of this check that the ledger exceeds.",
            &[(String::new(), breaches.len() as f64)],
        );
    }
    out
}
