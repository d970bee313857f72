//! Desktop notifications when items newly enter a pane: at most one per
//! pane per interval, bounded by a timeout, and silent (after saying so
//! once) where no notification service exists.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::ledger::panes::{Pane, PaneRows};
use crate::text::sanitize_line;

pub struct NewItems {
    pub pane: Pane,
    pub keys: Vec<String>,
}

/// Decides what is new; sending is separate so this part is tested alone.
pub struct Tracker {
    seen: HashMap<Pane, HashSet<String>>,
    last_sent: HashMap<Pane, Instant>,
    min_interval: Duration,
    primed: bool,
    /// New keys waiting for their pane's interval to pass.
    pending: HashMap<Pane, Vec<String>>,
}

impl Tracker {
    pub fn new(min_interval: Duration) -> Tracker {
        Tracker {
            seen: HashMap::new(),
            last_sent: HashMap::new(),
            min_interval,
            primed: false,
            pending: HashMap::new(),
        }
    }

    /// Items present at start are not news: only what enters afterwards is.
    pub fn observe(&mut self, panes: &[(Pane, PaneRows)], now: Instant) -> Vec<NewItems> {
        let mut batches = Vec::new();
        for (pane, rows) in panes {
            let keys: HashSet<String> = rows.op_keys().into_iter().map(str::to_string).collect();
            let previous = self.seen.insert(*pane, keys.clone()).unwrap_or_default();
            if self.primed {
                let mut fresh: Vec<String> = keys.difference(&previous).cloned().collect();
                fresh.sort();
                self.pending.entry(*pane).or_default().extend(fresh);
            }
            let due = self
                .last_sent
                .get(pane)
                .is_none_or(|at| now.duration_since(*at) >= self.min_interval);
            if due && let Some(waiting) = self.pending.remove(pane).filter(|keys| !keys.is_empty())
            {
                self.last_sent.insert(*pane, now);
                batches.push(NewItems {
                    pane: *pane,
                    keys: waiting,
                });
            }
        }
        self.primed = true;
        batches
    }
}

impl NewItems {
    pub fn summary(&self) -> String {
        let shown: Vec<String> = self.keys.iter().take(3).map(|k| sanitize_line(k)).collect();
        let more = if self.keys.len() > 3 {
            format!(" and {} more", self.keys.len() - 3)
        } else {
            String::new()
        };
        format!("{} new: {}{more}", self.keys.len(), shown.join(", "))
    }
}

/// Shows one notification; errors come back as one line.
pub async fn send(title: String, body: String, timeout: Duration) -> Result<(), String> {
    let shown = tokio::task::spawn_blocking(move || {
        notify_rust::Notification::new()
            .appname("effectwatch")
            .summary(&title)
            .body(&body)
            .show()
            .map(|_| ())
    });
    match tokio::time::timeout(timeout, shown).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(error))) => Err(error.to_string()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::panes::HeldRow;
    use chrono::Utc;

    fn held(keys: &[&str]) -> Vec<(Pane, PaneRows)> {
        let rows = keys
            .iter()
            .map(|key| HeldRow {
                op_key: key.to_string(),
                effect_id: 1,
                target: "t".into(),
                action: "refund".into(),
                amount_minor: None,
                currency: None,
                requested_by: "a".into(),
                held_since: Utc::now(),
                held_ms: 0,
                holder_op_key: "h".into(),
                holder_effect_id: 2,
                holder_state: "pending".into(),
                holder_age_ms: 0,
                holder_amount_minor: None,
                holder_currency: None,
                version: 1,
                overlap_from: None,
                overlap_to: None,
                still_asking: true,
            })
            .collect();
        vec![(Pane::Held, PaneRows::Held(rows))]
    }

    #[test]
    fn only_new_items_notify_and_batches_respect_the_interval() {
        let mut tracker = Tracker::new(Duration::from_secs(30));
        let start = Instant::now();
        assert!(
            tracker.observe(&held(&["a"]), start).is_empty(),
            "items present at start are not news"
        );
        let batch = tracker.observe(&held(&["a", "b"]), start + Duration::from_secs(1));
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].keys, vec!["b".to_string()]);
        assert!(
            tracker
                .observe(&held(&["a", "b", "c"]), start + Duration::from_secs(2))
                .is_empty(),
            "within the interval"
        );
        let batch = tracker.observe(
            &held(&["a", "b", "c", "d"]),
            start + Duration::from_secs(40),
        );
        assert_eq!(batch[0].keys, vec!["c".to_string(), "d".to_string()]);
        assert_eq!(batch[0].summary(), "2 new: c, d");
    }
}
