//! Health of the ledger for cron and monitoring: the pane counts and ages,
//! open escalations and (on request) suspected double effects, judged
//! against thresholds.

use crate::ledger::LedgerPool;
use serde::Serialize;

use crate::ledger::LedgerError;
use crate::ledger::panes::{self, PaneCount};

/// The two limits of one figure, in the monitoring-plugin convention:
/// above `warning` is WARNING, above `critical` is CRITICAL; None: not judged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub warning: Option<i64>,
    pub critical: Option<i64>,
}

impl Limits {
    pub fn is_set(&self) -> bool {
        self.warning.is_some() || self.critical.is_some()
    }

    /// How far `value` goes: the worst limit it is strictly above.
    fn judge(&self, value: i64) -> Option<(Level, i64)> {
        match (self.critical, self.warning) {
            (Some(critical), _) if value > critical => Some((Level::Critical, critical)),
            (_, Some(warning)) if value > warning => Some((Level::Warning, warning)),
            _ => None,
        }
    }
}

/// What may be open before the check warns or fails, per figure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub overdue: Limits,
    pub unknown: Limits,
    pub duplicates: Limits,
    pub held: Limits,
    pub escalations: Limits,
    pub suspected: Limits,
    /// The oldest item of the overdue, unknown, held and escalation panes, in ms.
    pub age_ms: Limits,
}

impl Thresholds {
    /// The limits of a pane's item count, for the panes that have any.
    pub fn of_pane(&self, pane: &str) -> Limits {
        match pane {
            "overdue" => self.overdue,
            "unknown" => self.unknown,
            "duplicates" => self.duplicates,
            "held" => self.held,
            "escalations" => self.escalations,
            _ => Limits::default(),
        }
    }
}

/// How bad a breach is; ordered, so the worst of several is their max.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Warning,
    Critical,
}

/// The figures a check judges.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Health {
    /// overdue, unknown, duplicates, held, escalations (open ones), approvals (awaiting a second operator).
    pub panes: Vec<PaneCount>,
    /// Effects in suspected double effects, when asked for.
    pub suspected: Option<i64>,
    /// Whether acknowledged writes survive a failover, when asked.
    pub durability: Option<crate::ledger::durability::Durability>,
    /// The ledger's triggers that do not fire in every session mode
    /// (disabled, or enabled for origin sessions only): the state machine,
    /// history and append-only guarantees then have a hole.
    pub weak_triggers: Vec<String>,
    /// Next steps owed (`ledger.next_steps`): a reconciler takes them up.
    pub steps_owed: i64,
    /// Flags and unsent compensations nobody is on (`ledger.unowned_work`):
    /// no next step, no escalation, no request for approval. One line each,
    /// `KEY: what is owed`, at most [`UNOWNED_SHOWN`].
    pub unowned_work: Vec<String>,
    /// Actions used in the last 30 days with no policy of their own
    /// (`ledger.actions_without_policy`), `action (N effects)` each: the
    /// defaults apply to them, or a misspelt name escapes a policy.
    pub actions_without_policy: Vec<String>,
    /// The ledger's schema, when this login may read it: a binary older or
    /// newer than its ledger is a warning.
    pub ledger_schema: Option<crate::ledger::migrate::SchemaVersion>,
    /// How the ledger's migrations stand against this binary's, when this
    /// login may read them.
    #[serde(skip)]
    pub schema: Option<crate::ledger::migrate::Standing>,
}

/// How many items of unowned work a check names.
pub const UNOWNED_SHOWN: i64 = 5;

/// One threshold exceeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Breach {
    pub what: String,
    pub value: i64,
    pub limit: i64,
    /// `items`, `ms` or `triggers`.
    pub unit: &'static str,
    pub level: Level,
}

/// The panes whose oldest item `max_age` bounds; a duplicate stays in its
/// pane for good, so its age says nothing about now.
pub const AGED_PANES: [&str; 4] = ["overdue", "unknown", "held", "escalations"];

pub async fn measure(
    pool: &LedgerPool,
    with_suspected: bool,
    with_durability: bool,
) -> Result<Health, LedgerError> {
    let mut tx = crate::ledger::snapshot::begin(pool).await?;
    // The audit trail is a record, not something waiting for anyone.
    let counts: Vec<PaneCount> = panes::counts(&mut tx, None)
        .await?
        .into_iter()
        .filter(|count| count.pane != "audit")
        .collect();
    let figures = crate::ledger::health::figures(&mut tx, UNOWNED_SHOWN, with_suspected).await?;
    let durability = match with_durability {
        true => Some(crate::ledger::durability::measure(&mut tx).await?),
        false => None,
    };
    tx.commit().await?;
    // A login that may not read the bookkeeping cannot tell; that is no
    // reason for the whole check to fail.
    let ledger_schema = crate::ledger::migrate::ledger_schema(pool)
        .await
        .ok()
        .flatten();
    let schema = crate::ledger::migrate::standing(pool).await.ok();
    Ok(Health {
        ledger_schema,
        schema,
        panes: counts,
        suspected: figures.suspected,
        durability,
        weak_triggers: figures.weak_triggers,
        steps_owed: figures.steps_owed,
        unowned_work: figures.unowned_work,
        actions_without_policy: figures.actions_without_policy,
    })
}

impl Health {
    pub fn items(&self, pane: &str) -> i64 {
        self.panes
            .iter()
            .find(|count| count.pane == pane)
            .map_or(0, |count| count.items)
    }

    pub fn oldest_ms(&self, pane: &str) -> Option<i64> {
        self.panes
            .iter()
            .find(|count| count.pane == pane)
            .and_then(|count| count.oldest_ms)
    }
}

/// Every figure above one of its limits, each at the worst limit it is
/// above; a trigger that does not always fire is critical whatever the limits.
pub fn evaluate(health: &Health, thresholds: &Thresholds) -> Vec<Breach> {
    let mut breaches = Vec::new();
    if !health.weak_triggers.is_empty() {
        breaches.push(Breach {
            what: format!(
                "ledger triggers not enabled always ({})",
                health.weak_triggers.join(", ")
            ),
            value: health.weak_triggers.len() as i64,
            limit: 0,
            unit: "triggers",
            level: Level::Critical,
        });
    }
    if !health.unowned_work.is_empty() {
        breaches.push(Breach {
            what: format!(
                "work nobody is on, no next step and no person told ({}): run `effectwatch \
                 reconcile --once` or escalate it",
                crate::text::sanitize_line(&health.unowned_work.join("; "))
            ),
            value: health.unowned_work.len() as i64,
            limit: 0,
            unit: "items",
            level: Level::Warning,
        });
    }
    if !health.actions_without_policy.is_empty() {
        breaches.push(Breach {
            what: format!(
                "actions in use with no policy of their own, under the defaults: {} (effectwatch \
                 policy set ACTION …, or --unknown-actions refuse)",
                crate::text::sanitize_line(&health.actions_without_policy.join(", "))
            ),
            value: health.actions_without_policy.len() as i64,
            limit: 0,
            unit: "items",
            level: Level::Warning,
        });
    }
    if let Some(error) = health.schema.as_ref().and_then(|schema| schema.error()) {
        breaches.push(Breach {
            what: error.to_string(),
            value: 1,
            limit: 0,
            unit: "schema",
            level: Level::Warning,
        });
    }
    if let Some(durability) = &health.durability {
        let verdict = durability.verdict();
        let level = verdict.risk.map(|risk| match risk {
            crate::ledger::durability::Risk::Failover => Level::Warning,
            crate::ledger::durability::Risk::Severe => Level::Critical,
        });
        if let Some(level) = level {
            breaches.push(Breach {
                what: format!("not failover-safe: {}", verdict.sentence),
                value: verdict.synchronous_standbys as i64,
                limit: 0,
                unit: "durability",
                level,
            });
        }
    }
    let mut judge = |what: String, value: i64, limits: Limits, unit: &'static str| {
        if let Some((level, limit)) = limits.judge(value) {
            breaches.push(Breach {
                what,
                value,
                limit,
                unit,
                level,
            });
        }
    };
    for pane in ["overdue", "unknown", "duplicates", "held", "escalations"] {
        judge(
            pane.to_string(),
            health.items(pane),
            thresholds.of_pane(pane),
            "items",
        );
    }
    if let Some(value) = health.suspected {
        judge(
            "suspected double effects".to_string(),
            value,
            thresholds.suspected,
            "items",
        );
    }
    for pane in AGED_PANES {
        if let Some(oldest) = health.oldest_ms(pane) {
            judge(format!("oldest {pane}"), oldest, thresholds.age_ms, "ms");
        }
    }
    breaches
}

/// The worst level among the breaches; None: all within their limits.
pub fn worst(breaches: &[Breach]) -> Option<Level> {
    breaches.iter().map(|breach| breach.level).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> Health {
        let count = |pane: &str, items, oldest_ms| PaneCount {
            pane: pane.to_string(),
            items,
            oldest_ms,
        };
        Health {
            panes: vec![
                count("overdue", 2, Some(90_000)),
                count("unknown", 0, None),
                count("duplicates", 5, Some(86_400_000)),
                count("held", 1, Some(1_000)),
                count("escalations", 0, None),
            ],
            suspected: Some(1),
            durability: None,
            ledger_schema: None,
            schema: None,
            weak_triggers: Vec::new(),
            steps_owed: 0,
            unowned_work: Vec::new(),
            actions_without_policy: Vec::new(),
        }
    }

    #[test]
    fn work_nobody_is_on_is_a_warning_whatever_the_thresholds() {
        let mut health = health();
        health.unowned_work = vec!["refund:A: decide the mismatch".to_string()];
        let breaches = evaluate(&health, &Thresholds::default());
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        assert_eq!(breaches[0].level, Level::Warning);
        assert!(breaches[0].what.contains("refund:A: decide the mismatch"));
    }

    #[test]
    fn only_exceeded_thresholds_breach() {
        let critical = |limit| Limits {
            warning: None,
            critical: Some(limit),
        };
        let thresholds = Thresholds {
            overdue: critical(2),
            held: critical(0),
            suspected: critical(0),
            age_ms: critical(60_000),
            ..Thresholds::default()
        };
        let what: Vec<String> = evaluate(&health(), &thresholds)
            .into_iter()
            .map(|b| b.what)
            .collect();
        // duplicates are a day old but never judged by age.
        assert_eq!(what, ["held", "suspected double effects", "oldest overdue"]);
        assert!(evaluate(&health(), &Thresholds::default()).is_empty());
    }

    #[test]
    fn a_figure_is_judged_at_the_worst_limit_it_is_above() {
        let thresholds = Thresholds {
            overdue: Limits {
                warning: Some(1),
                critical: Some(5),
            },
            duplicates: Limits {
                warning: Some(1),
                critical: Some(4),
            },
            ..Thresholds::default()
        };
        let breaches = evaluate(&health(), &thresholds);
        let judged: Vec<(&str, Level, i64)> = breaches
            .iter()
            .map(|b| (b.what.as_str(), b.level, b.limit))
            .collect();
        assert_eq!(
            judged,
            [
                ("overdue", Level::Warning, 1),
                ("duplicates", Level::Critical, 4)
            ]
        );
        assert_eq!(worst(&breaches), Some(Level::Critical));
        assert_eq!(worst(&breaches[..1]), Some(Level::Warning));
        assert_eq!(worst(&[]), None);
    }

    #[test]
    fn a_weak_trigger_fails_whatever_the_thresholds() {
        let health = Health {
            weak_triggers: vec!["effects.effects_guard".into()],
            ..health()
        };
        let breaches = evaluate(&health, &Thresholds::default());
        assert_eq!(breaches.len(), 1);
        assert_eq!(breaches[0].level, Level::Critical);
        assert!(breaches[0].what.contains("effects.effects_guard"));
    }
}
