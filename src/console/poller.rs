//! Background polling: reads the panes in one snapshot transaction, sends
//! the result to the UI over a channel, wakes early on NOTIFY, and keeps
//! trying with backoff when the database goes away. The UI never waits on it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;

use super::app::{Message, Snapshot, WINDOW};
use super::model::{ApprovalRow, EscalationRow};
use crate::ledger::finance::{self, FinanceReview};
use crate::ledger::panes::{self, Filter, Pane};
use crate::ledger::{self, ConnectSettings, LedgerError, NOTIFY_CHANNEL, audit, timetravel};

#[derive(Debug, Clone, PartialEq)]
pub struct PollSettings {
    pub filter: Filter,
    pub interval: Duration,
    pub paused: bool,
    pub offsets: [usize; 4],
    /// Time travel: read the panes as they were at this instant.
    pub at: Option<DateTime<Utc>>,
    /// The finance view is open: read suspected doubles and exposure too.
    pub finance: bool,
}

const AUDIT_ROWS: i64 = 300;
/// The finance view reviews this many days of succeeded effects.
const FINANCE_DAYS: i64 = 30;
const ESCALATION_ROWS: i64 = 500;
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub fn spawn(
    connect: ConnectSettings,
    mut settings: watch::Receiver<PollSettings>,
    wake: Arc<Notify>,
    messages: mpsc::Sender<Message>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(250);
        let mut pool: Option<PgPool> = None;
        let mut listener: Option<JoinHandle<()>> = None;
        loop {
            let current = settings.borrow_and_update().clone();
            if pool.is_none() {
                match ledger::connect(&connect).await {
                    Ok(connected) => {
                        listener = Some(spawn_listener(connected.clone(), wake.clone()));
                        pool = Some(connected);
                        backoff = Duration::from_millis(250);
                    }
                    Err(error) => {
                        if messages
                            .send(Message::PollFailed(error.to_string()))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                }
            }
            if !current.paused
                && let Some(connected) = &pool
            {
                let message = match poll(connected, &current).await {
                    Ok(snapshot) => Message::Snapshot(Box::new(snapshot)),
                    Err(error) => {
                        if error.is_connection() {
                            pool = None;
                            if let Some(task) = listener.take() {
                                task.abort();
                            }
                        }
                        Message::PollFailed(error.to_string())
                    }
                };
                if messages.send(message).await.is_err() {
                    return;
                }
                if pool.is_none() {
                    continue;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(current.interval) => {}
                _ = wake.notified() => {
                    // Many changes arrive in bursts: let them settle briefly.
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                changed = settings.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    })
}

/// Turns NOTIFY on the ledger channel into an early poll.
fn spawn_listener(pool: PgPool, wake: Arc<Notify>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Ok(mut listener) = PgListener::connect_with(&pool).await else {
            return;
        };
        if listener.listen(NOTIFY_CHANNEL).await.is_err() {
            return;
        }
        while listener.recv().await.is_ok() {
            wake.notify_one();
        }
    })
}

/// One consistent read of everything the console shows.
pub async fn poll(pool: &PgPool, settings: &PollSettings) -> Result<Snapshot, LedgerError> {
    let started = Instant::now();
    let mut tx = pool.begin().await?;
    sqlx::query("set transaction isolation level repeatable read read only")
        .execute(&mut *tx)
        .await?;
    let mut rows = Vec::with_capacity(4);
    let mut counts = Vec::with_capacity(4);
    let all_counts = match (settings.filter.is_empty(), settings.at) {
        (false, _) => Vec::new(),
        (true, None) => panes::counts(&mut *tx).await?,
        (true, Some(at)) => timetravel::counts_at(&mut *tx, at).await?,
    };
    for (index, pane) in Pane::ALL.into_iter().enumerate() {
        let (filter, offset, limit) = (
            &settings.filter,
            settings.offsets[index] as i64,
            WINDOW as i64,
        );
        let pane_rows = match settings.at {
            None => panes::fetch(&mut *tx, pane, filter, limit, offset).await?,
            Some(at) => timetravel::fetch_at(&mut *tx, pane, at, filter, limit, offset).await?,
        };
        rows.push((pane, pane_rows));
        let count = match (
            all_counts.iter().find(|c| c.pane == pane.name()),
            settings.at,
        ) {
            (Some(count), _) => count.items,
            (None, None) => panes::count(&mut *tx, pane, filter).await?,
            (None, Some(at)) => timetravel::count_at(&mut *tx, pane, at, filter).await?,
        };
        counts.push((pane, count));
    }
    let escalations = sqlx::query_as::<_, EscalationRow>(
        "select s.escalation_key, s.op_key, s.sink, s.decision_needed, s.state, s.delivery_attempts,
                s.last_error, s.created_by, s.created_at,
                (extract(epoch from s.age) * 1000)::bigint as age_ms, e.version as effect_version
           from ledger.open_escalations s join ledger.effects e on e.id = s.effect_id
          order by s.created_at desc limit $1",
    )
    .bind(ESCALATION_ROWS)
    .fetch_all(&mut *tx)
    .await?;
    let approvals = sqlx::query_as::<_, ApprovalRow>(
        "select request_id, op_key, target, amount_minor, currency, requested_by, reason,
                (extract(epoch from waiting_for) * 1000)::bigint as waiting_ms, version
           from ledger.awaiting_approval order by requested_at limit $1",
    )
    .bind(ESCALATION_ROWS)
    .fetch_all(&mut *tx)
    .await?;
    let audit = audit::recent(&mut *tx, AUDIT_ROWS).await?;
    let finance = if settings.finance {
        let since = settings.at.unwrap_or_else(Utc::now) - chrono::Duration::days(FINANCE_DAYS);
        Some(FinanceReview {
            since: Some(since),
            suspected: finance::suspected(&mut *tx, Some(since)).await?,
            exposure: finance::exposure(&mut *tx, Some(since)).await?,
        })
    } else {
        None
    };
    let (database, role): (String, String) =
        sqlx::query_as("select current_database()::text, session_user::text")
            .fetch_one(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(Snapshot {
        panes: rows,
        counts,
        escalations,
        approvals,
        audit,
        finance,
        polled_at: Utc::now(),
        latency: started.elapsed(),
        database,
        role,
        offsets: settings.offsets,
    })
}
