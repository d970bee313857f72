//! Health of the ledger for cron and monitoring: the pane counts and ages,
//! open escalations and (on request) suspected double effects, judged
//! against thresholds.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

use super::LedgerError;
use super::panes::{self, PaneCount};

/// What may be open before the check fails; None: not checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub max_overdue: Option<i64>,
    pub max_unknown: Option<i64>,
    pub max_duplicates: Option<i64>,
    pub max_held: Option<i64>,
    pub max_escalations: Option<i64>,
    pub max_suspected: Option<i64>,
    /// The oldest item of the overdue, unknown, held and escalation panes.
    pub max_age: Option<Duration>,
}

/// The figures a check judges.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Health {
    /// overdue, unknown, duplicates, held, escalations (open ones), approvals (awaiting a second operator).
    pub panes: Vec<PaneCount>,
    /// Effects in suspected double effects, when asked for.
    pub suspected: Option<i64>,
    /// The ledger's triggers that do not fire in every session mode
    /// (disabled, or enabled for origin sessions only): the state machine,
    /// history and append-only guarantees then have a hole.
    pub weak_triggers: Vec<String>,
}

/// One threshold exceeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Breach {
    pub what: String,
    pub value: i64,
    pub limit: i64,
    /// `items`, `ms` or `triggers`.
    pub unit: &'static str,
}

/// The panes whose oldest item `max_age` bounds; a duplicate stays in its
/// pane for good, so its age says nothing about now.
pub const AGED_PANES: [&str; 4] = ["overdue", "unknown", "held", "escalations"];

pub async fn measure(pool: &PgPool, with_suspected: bool) -> Result<Health, LedgerError> {
    let mut tx = super::snapshot::begin(pool).await?;
    // The audit trail is a record, not something waiting for anyone.
    let counts: Vec<PaneCount> = panes::counts(&mut *tx)
        .await?
        .into_iter()
        .filter(|count| count.pane != "audit")
        .collect();
    let weak_triggers = weak_triggers(&mut tx).await?;
    let suspected = if with_suspected {
        Some(
            sqlx::query_scalar::<_, i64>("select count(*) from ledger.suspected_double_effects")
                .fetch_one(&mut *tx)
                .await?,
        )
    } else {
        None
    };
    tx.commit().await?;
    Ok(Health {
        panes: counts,
        suspected,
        weak_triggers,
    })
}

/// Triggers on the ledger's tables not set to ENABLE ALWAYS ('A'); what
/// `alter table … disable trigger`, or a plain `enable trigger`, leaves.
async fn weak_triggers(tx: &mut sqlx::PgConnection) -> Result<Vec<String>, LedgerError> {
    Ok(sqlx::query_scalar(
        "select c.relname || '.' || t.tgname
           from pg_trigger t
           join pg_class c on c.oid = t.tgrelid
           join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'ledger' and not t.tgisinternal and t.tgenabled <> 'A'
          order by 1",
    )
    .fetch_all(tx)
    .await?)
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

/// Every threshold the figures exceed (strictly above the limit).
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
        });
    }
    let limits = [
        ("overdue", thresholds.max_overdue),
        ("unknown", thresholds.max_unknown),
        ("duplicates", thresholds.max_duplicates),
        ("held", thresholds.max_held),
        ("escalations", thresholds.max_escalations),
    ];
    for (pane, limit) in limits {
        if let Some(limit) = limit
            && health.items(pane) > limit
        {
            breaches.push(Breach {
                what: pane.to_string(),
                value: health.items(pane),
                limit,
                unit: "items",
            });
        }
    }
    if let (Some(limit), Some(value)) = (thresholds.max_suspected, health.suspected)
        && value > limit
    {
        breaches.push(Breach {
            what: "suspected double effects".to_string(),
            value,
            limit,
            unit: "items",
        });
    }
    if let Some(max_age) = thresholds.max_age {
        let limit = i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX);
        for pane in AGED_PANES {
            if let Some(oldest) = health.oldest_ms(pane)
                && oldest > limit
            {
                breaches.push(Breach {
                    what: format!("oldest {pane}"),
                    value: oldest,
                    limit,
                    unit: "ms",
                });
            }
        }
    }
    breaches
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
            weak_triggers: Vec::new(),
        }
    }

    #[test]
    fn only_exceeded_thresholds_breach() {
        let thresholds = Thresholds {
            max_overdue: Some(2),
            max_held: Some(0),
            max_suspected: Some(0),
            max_age: Some(Duration::from_secs(60)),
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
    fn a_weak_trigger_fails_whatever_the_thresholds() {
        let health = Health {
            weak_triggers: vec!["effects.effects_guard".into()],
            ..health()
        };
        let breaches = evaluate(&health, &Thresholds::default());
        assert_eq!(breaches.len(), 1);
        assert!(breaches[0].what.contains("effects.effects_guard"));
    }
}
