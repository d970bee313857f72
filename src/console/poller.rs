//! Background polling: reads the panes in one snapshot transaction, sends
//! the result to the UI over a channel, wakes early on NOTIFY, and keeps
//! trying with backoff when the database goes away. The UI never waits on it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ledger::LedgerPool;
use chrono::Utc;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;

use super::app::{Message, Notifications, Snapshot, WINDOW};
use crate::ledger::escalations::{ApprovalRow, EscalationRow};
use crate::ledger::finance::{self, FinanceReview};
use crate::ledger::panes::{self, Pane, PaneRows};
use crate::ledger::{
    self, ConnectSettings, LedgerError, NOTIFY_CHANNEL, audit, channel, escalations, snapshot,
};

// What to read is the app's to say; the poller reads it.
pub use super::app::PollSettings;

const AUDIT_ROWS: i64 = 300;
/// The finance view reviews this many days of succeeded effects.
const FINANCE_DAYS: i64 = 30;
/// How often a live console reads the finance review again. It reviews a
/// window of settled effects, so its cost grows with the ledger's traffic
/// (about 18 s at 1M effects in the window, against 10 ms for every pane's
/// count): read every poll it would hold up every pane. Between readings the
/// snapshot carries the last review, which says when it was read.
const FINANCE_EVERY: Duration = Duration::from_secs(30);
const ESCALATION_ROWS: i64 = 500;
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Changes arrive in bursts: a NOTIFY waits this long for the rest.
const SETTLE: Duration = Duration::from_millis(150);
/// The least time between the starts of two polls woken by NOTIFY.
const MIN_WAKE_GAP: Duration = Duration::from_millis(250);
/// The most a poll woken by NOTIFY waits after the previous one started.
const MAX_WAKE_GAP: Duration = Duration::from_secs(1);
/// How long a listener waits for its own probe before it concludes that
/// notifications do not reach it.
const PROBE_WAIT: Duration = Duration::from_secs(3);
/// How long a console whose notifications are lost polls before it tries to
/// listen again (the pooler may have been taken out of the way).
const LOST_RETRY: Duration = Duration::from_secs(60);
/// How much longer than the statement timeout a poll may take before the
/// database counts as gone: a peer that vanished without a reset never
/// answers, and the server-side timeout cannot fire where no server is.
const ANSWER_GRACE: Duration = Duration::from_secs(5);

/// How often a console checks between polls that the database still
/// answers: with a long interval an outage would otherwise show only at the
/// next poll, the console saying `live` all the while.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// The LISTEN task, stopped with the pool it listens on or with the poller.
struct Listening(JoinHandle<()>);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// When a poll woken by NOTIFY may start: once the burst has settled, and
/// never sooner than a quarter of the interval after the previous poll
/// started (so a busy ledger does not turn a short interval into many polls
/// a second), but never later than a second after it either: a change the
/// console was told about shows within about a second, whatever the
/// interval. Settings the operator changed are not held back by this.
pub fn wake_poll_at(last_start: Instant, now: Instant, interval: Duration) -> Instant {
    let gap = (interval / 4).clamp(MIN_WAKE_GAP, MAX_WAKE_GAP);
    (now + SETTLE).max(last_start + gap)
}

pub fn spawn(
    connect: ConnectSettings,
    mut settings: watch::Receiver<PollSettings>,
    messages: mpsc::Sender<Message>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut poller = Poller::new(connect, messages);
        let _ = poller.run(&mut settings).await;
    })
}

/// The console went away: its messages or its settings closed.
struct Closed;

/// Sends a message to the console, or says it has gone.
async fn tell(messages: &mpsc::Sender<Message>, message: Message) -> Result<(), Closed> {
    messages.send(message).await.map_err(|_| Closed)
}

/// The last finance reading (a review, or why it failed), when it was
/// read, and for which settings.
type FinanceReading = (Instant, PollSettings, Result<FinanceReview, String>);

/// The poller's connection, its listener, and what it keeps between polls.
struct Poller {
    connect: ConnectSettings,
    messages: mpsc::Sender<Message>,
    wake: Arc<Notify>,
    /// Told by the listener when its connection ends: the server may be gone.
    lost: Arc<Notify>,
    heard: Arc<watch::Sender<Notifications>>,
    hearing: watch::Receiver<Notifications>,
    heartbeat_within: Duration,
    answer_within: Duration,
    backoff: Duration,
    pool: Option<LedgerPool>,
    /// Only ever dropped (which stops it), never read: hence the `_`.
    _listener: Option<Listening>,
    /// Whether the server read is a standby, which sends no notifications:
    /// one promoted (a failover) is listened to from the poll that finds
    /// it a primary; a primary demoted is no longer.
    reading_standby: bool,
    last_start: Instant,
    /// A failure is kept as long as a review: a review slower than the
    /// statement timeout must not hold up every poll.
    last_finance: Option<FinanceReading>,
}

impl Poller {
    fn new(connect: ConnectSettings, messages: mpsc::Sender<Message>) -> Poller {
        let (heard, hearing) = watch::channel(Notifications::Reconnecting);
        Poller {
            heartbeat_within: connect.connect_timeout + ANSWER_GRACE,
            answer_within: connect.statement_timeout + ANSWER_GRACE,
            connect,
            messages,
            wake: Arc::new(Notify::new()),
            lost: Arc::new(Notify::new()),
            heard: Arc::new(heard),
            hearing,
            backoff: Duration::from_millis(250),
            pool: None,
            _listener: None,
            reading_standby: false,
            last_start: Instant::now(),
            last_finance: None,
        }
    }

    /// Connects, polls and waits, again and again, until the console goes.
    async fn run(&mut self, settings: &mut watch::Receiver<PollSettings>) -> Result<(), Closed> {
        loop {
            let current = settings.borrow_and_update().clone();
            if self.pool.is_none() && !self.connect(&current).await? {
                continue;
            }
            if !current.paused && self.pool.is_some() {
                self.poll(&current).await?;
                if self.pool.is_none() {
                    continue;
                }
                // Read once per instant: the next poll is for another one.
                if current.at.is_some() {
                    settings.changed().await.map_err(|_| Closed)?;
                    continue;
                }
            }
            self.wait(&current, settings).await?;
        }
    }

    /// Connects, and listens when there is something to be told; false
    /// after a failure, said and waited out with backoff.
    async fn connect(&mut self, current: &PollSettings) -> Result<bool, Closed> {
        match ledger::connect(&self.connect).await {
            Ok(connected) => {
                // The past does not change: a console reading an
                // instant has nothing to be told; a standby sends
                // no notifications, so one reading it polls.
                // A server that cannot say is taken for a primary:
                // the listener then finds out for itself.
                let standby = snapshot::is_standby(&connected).await.unwrap_or(false);
                self.pool = Some(connected);
                self.listen_unless(current.at.is_some() || standby);
                self.reading_standby = standby;
                self.backoff = Duration::from_millis(250);
                Ok(true)
            }
            Err(error) => {
                tell(&self.messages, Message::PollFailed(error.to_string())).await?;
                tokio::time::sleep(self.backoff).await;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                Ok(false)
            }
        }
    }

    /// Listens to the server read, unless it has nothing to tell.
    fn listen_unless(&mut self, nothing_to_tell: bool) {
        self._listener = match (&self.pool, nothing_to_tell) {
            (Some(connected), false) => Some(Listening(spawn_listener(
                connected.clone(),
                self.wake.clone(),
                self.lost.clone(),
                self.heard.clone(),
            ))),
            _ => None,
        };
    }

    /// Drops the connection and its listener: the next turn connects again.
    fn disconnect(&mut self) {
        self.pool = None;
        self._listener = None;
    }

    /// One read of everything, told to the console: the snapshot, or why
    /// there is none (a lost connection is dropped).
    async fn poll(&mut self, current: &PollSettings) -> Result<(), Closed> {
        let Some(connected) = self.pool.clone() else {
            return Ok(());
        };
        self.last_start = Instant::now();
        let keep = self
            .last_finance
            .as_ref()
            .filter(|(read, read_for, _)| {
                current.at.is_none()
                    && read.elapsed() < FINANCE_EVERY
                    && read_for.filter == current.filter
                    && read_for.settled_actions == current.settled_actions
            })
            .map(|(_, _, reading)| reading);
        let kept = keep.is_some();
        let reading = poll_with(&connected, current, keep);
        let message = match tokio::time::timeout(self.answer_within, reading).await {
            Ok(Ok(mut snapshot)) => {
                let standby_now = snapshot.replica_lag.is_some();
                if current.at.is_none() && standby_now != self.reading_standby {
                    self.reading_standby = standby_now;
                    self.listen_unless(standby_now);
                }
                snapshot.notifications = *self.hearing.borrow();
                snapshot.server = Some(connected.server());
                if !kept {
                    let reading = match (&snapshot.finance, &snapshot.finance_error) {
                        (Some(review), _) => Ok(review.clone()),
                        (None, error) => Err(error.clone().unwrap_or_default()),
                    };
                    self.last_finance = Some((Instant::now(), current.clone(), reading));
                }
                Message::Snapshot(Box::new(snapshot))
            }
            Ok(Err(error)) => {
                if error.is_connection() {
                    self.disconnect();
                }
                Message::PollFailed(error.to_string())
            }
            Err(_) => {
                self.disconnect();
                Message::PollFailed(format!(
                    "no answer from the database within {} s",
                    self.answer_within.as_secs()
                ))
            }
        };
        tell(&self.messages, message).await
    }

    /// Until the next poll is due: the interval, a notification (once its
    /// burst settles), or changed settings. Meanwhile the database is
    /// checked every [`HEARTBEAT`], and at once when the listener loses it.
    async fn wait(
        &mut self,
        current: &PollSettings,
        settings: &mut watch::Receiver<PollSettings>,
    ) -> Result<(), Closed> {
        let poll_at = tokio::time::Instant::now() + current.interval;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(poll_at) => return Ok(()),
                _ = self.wake.notified() => {
                    let at = wake_poll_at(self.last_start, Instant::now(), current.interval);
                    tokio::select! {
                        _ = tokio::time::sleep_until(at.into()) => {}
                        changed = settings.changed() => {
                            changed.map_err(|_| Closed)?;
                        }
                    }
                    return Ok(());
                }
                changed = settings.changed() => {
                    changed.map_err(|_| Closed)?;
                    return Ok(());
                }
                _ = tokio::time::sleep(HEARTBEAT) => {}
                _ = self.lost.notified() => {}
            }
            let Some(connected) = &self.pool else {
                return Ok(());
            };
            if let Err(error) = answers(connected, self.heartbeat_within).await {
                self.disconnect();
                tell(&self.messages, Message::PollFailed(error)).await?;
                return Ok(());
            }
        }
    }
}

/// Whether the database still answers, within `within`: between polls,
/// so that a lost server shows as such before the next poll is due.
async fn answers(pool: &LedgerPool, within: Duration) -> Result<(), String> {
    match tokio::time::timeout(within, channel::ping(pool)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!(
            "no answer from the database within {} s",
            within.as_secs()
        )),
    }
}

/// Turns NOTIFY on the ledger channel into an early poll. Its connection
/// is made again whenever it ends (a restarted server, a terminated
/// backend), with backoff, and each reconnect wakes one poll for what changed
/// while it was down; its end has the poller check the database at once.
/// A LISTEN that is accepted is proven by a probe the listener announces
/// through the pool: behind a transaction pooler the probe never comes back,
/// and `heard` says so instead of claiming to listen.
fn spawn_listener(
    pool: LedgerPool,
    wake: Arc<Notify>,
    lost: Arc<Notify>,
    heard: Arc<watch::Sender<Notifications>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(250);
        let mut reconnect = false;
        loop {
            let listener = match pool.listener().await {
                Ok(mut listener) => match listener.listen(NOTIFY_CHANNEL).await {
                    Ok(()) => Some(listener),
                    Err(_) => None,
                },
                Err(_) => None,
            };
            let Some(mut listener) = listener else {
                heard.send_replace(Notifications::Reconnecting);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            };
            match probe(&pool, &mut listener, &wake).await {
                Some(true) => {}
                Some(false) => {
                    heard.send_replace(Notifications::Lost);
                    drop(listener);
                    tokio::time::sleep(LOST_RETRY).await;
                    continue;
                }
                // The probe could not be sent, or the connection ended: the
                // same backoff as a listener that could not connect.
                None => {
                    heard.send_replace(Notifications::Reconnecting);
                    drop(listener);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
            backoff = Duration::from_millis(250);
            heard.send_replace(Notifications::Arriving);
            if reconnect {
                wake.notify_one();
            }
            reconnect = true;
            // try_recv answers None when the connection is gone: make a new one.
            while let Ok(Some(notification)) = listener.try_recv().await {
                if !channel::is_probe(notification.payload()) {
                    wake.notify_one();
                }
            }
            heard.send_replace(Notifications::Reconnecting);
            lost.notify_one();
        }
    })
}

/// Announces a probe through the pool and waits for it on `listener`:
/// whether it arrived, or None when the listener's connection ended first.
/// Changes announced meanwhile still wake a poll.
async fn probe(pool: &LedgerPool, listener: &mut channel::Listener, wake: &Notify) -> Option<bool> {
    let token = format!("{}-{}", std::process::id(), rand::random::<u64>());
    let Ok(payload) = channel::send_probe(pool, &token).await else {
        // The pool cannot reach the server: the poll says so; try again.
        return None;
    };
    let deadline = tokio::time::Instant::now() + PROBE_WAIT;
    loop {
        match tokio::time::timeout_at(deadline, listener.try_recv()).await {
            Err(_) => return Some(false),
            Ok(Ok(Some(notification))) if notification.payload() == payload => return Some(true),
            Ok(Ok(Some(notification))) => {
                if !channel::is_probe(notification.payload()) {
                    wake.notify_one();
                }
            }
            Ok(Ok(None)) | Ok(Err(_)) => return None,
        }
    }
}

/// One consistent read of everything the console shows.
pub async fn poll(pool: &LedgerPool, settings: &PollSettings) -> Result<Snapshot, LedgerError> {
    poll_keeping_finance(pool, settings, None).await
}

/// As [`poll`], but with `kept` as the finance review instead of reading it
/// again (what its effects allow is still read in this snapshot).
pub async fn poll_keeping_finance(
    pool: &LedgerPool,
    settings: &PollSettings,
    kept: Option<&FinanceReview>,
) -> Result<Snapshot, LedgerError> {
    let kept = kept.map(|review| Ok(review.clone()));
    poll_with(pool, settings, kept.as_ref()).await
}

/// As [`poll`], with the last finance reading (a review, or why it failed)
/// instead of a new one when `kept` is given.
async fn poll_with(
    pool: &LedgerPool,
    settings: &PollSettings,
    kept: Option<&Result<FinanceReview, String>>,
) -> Result<Snapshot, LedgerError> {
    let started = Instant::now();
    let mut tx = crate::ledger::snapshot::begin(pool).await?;
    let all_counts = match settings.filter.is_empty() {
        false => Vec::new(),
        true => panes::counts(&mut tx, settings.at).await?,
    };
    let (rows, counts) = read_panes(&mut tx, settings, &all_counts).await?;
    // The duplicates pane lists what needs a look and counts the rest;
    // unfiltered, from the same counts as the tabs.
    let replays_only = match settings.filter.is_empty() {
        true => all_counts
            .iter()
            .find(|count| count.pane == "replays")
            .map(|count| count.items),
        false => panes::replays_not_listed(&mut tx, settings.at, &settings.filter).await?,
    };
    let escalations = escalations::open(&mut tx, settings.at, ESCALATION_ROWS).await?;
    let approvals = escalations::awaiting_approval(&mut tx, settings.at, ESCALATION_ROWS).await?;
    // Unfiltered, the tabs of the other views count from the same snapshot.
    let count_of = |view: &str| {
        all_counts
            .iter()
            .find(|count| count.pane == view)
            .map(|count| count.items)
    };
    let escalation_count = count_of("escalations")
        .zip(count_of("approvals"))
        .map(|(escalations, approvals)| escalations + approvals);
    let audit_count = count_of("audit");
    let audit = audit::recent(&mut tx, settings.at, AUDIT_ROWS).await?;
    let (finance, finance_error) = read_finance(&mut tx, settings, kept).await?;
    let applicability = match settings.at {
        Some(_) => Default::default(),
        None => {
            let shown = shown_effects(&rows, &escalations, &approvals, finance.as_ref());
            crate::ledger::actions::applicability(&mut tx, &shown).await?
        }
    };
    let (replica_lag, primary_heard) = snapshot::replica(&mut tx).await?;
    // A standby's settings are not what decides: its primary's are.
    let durability = match (settings.at, replica_lag) {
        (None, None) => Some(crate::ledger::durability::measure(&mut tx).await?.verdict()),
        _ => None,
    };
    let (database, role) = snapshot::whoami(&mut tx).await?;
    tx.commit().await?;
    Ok(Snapshot {
        panes: rows,
        counts,
        replays_only,
        escalations,
        approvals,
        audit,
        escalation_count,
        audit_count,
        notifications: Notifications::Reconnecting,
        server: None,
        finance,
        applicability,
        replica_lag,
        primary_heard,
        durability,
        finance_error,
        polled_at: Utc::now(),
        latency: started.elapsed(),
        database,
        role,
        offsets: settings.offsets,
        filter: settings.filter.clone(),
        settled_actions: settings.settled_actions,
    })
}

/// Each pane's window of rows, and how many items it holds: from the
/// unfiltered counts when there are some, else counted under the filter.
async fn read_panes(
    tx: &mut crate::ledger::LedgerTransaction<'_>,
    settings: &PollSettings,
    all_counts: &[panes::PaneCount],
) -> Result<PanesRead, LedgerError> {
    let mut rows = Vec::with_capacity(4);
    let mut counts = Vec::with_capacity(4);
    for (index, pane) in Pane::ALL.into_iter().enumerate() {
        let (filter, offset, limit) = (
            &settings.filter,
            settings.offsets[index] as i64,
            WINDOW as i64,
        );
        let pane_rows = panes::fetch(&mut *tx, pane, settings.at, filter, limit, offset).await?;
        rows.push((pane, pane_rows));
        let count = match all_counts.iter().find(|c| c.pane == pane.name()) {
            Some(count) => count.items,
            None => panes::count(&mut *tx, pane, settings.at, filter).await?,
        };
        counts.push((pane, count));
    }
    Ok((rows, counts))
}

/// The panes' rows, and their items' counts.
type PanesRead = (Vec<(Pane, PaneRows)>, Vec<(Pane, i64)>);

/// The finance review, or why it failed: the one `kept`, else read in
/// the same snapshot as the panes, so its tab count agrees with them;
/// under a savepoint, so a failing review (a sum out of range) leaves
/// every pane fresh.
async fn read_finance(
    tx: &mut crate::ledger::LedgerTransaction<'_>,
    settings: &PollSettings,
    kept: Option<&Result<FinanceReview, String>>,
) -> Result<(Option<FinanceReview>, Option<String>), LedgerError> {
    if let Some(kept) = kept {
        return Ok(match kept {
            Ok(review) => (Some(review.clone()), None),
            Err(error) => (None, Some(error.clone())),
        });
    }
    let mut review = tx.begin().await?;
    match finance_review(&mut review, settings).await {
        Ok(found) => {
            review.commit().await?;
            Ok((Some(found), None))
        }
        Err(error) => {
            review.rollback().await?;
            Ok((None, Some(error.to_string())))
        }
    }
}

/// Every effect a view lists, once: what an operator can select and act on.
fn shown_effects(
    panes: &[(Pane, PaneRows)],
    escalations: &[EscalationRow],
    approvals: &[ApprovalRow],
    finance: Option<&FinanceReview>,
) -> Vec<String> {
    let mut keys: Vec<String> = panes
        .iter()
        .flat_map(|(_, rows)| rows.op_keys())
        .map(str::to_string)
        .chain(escalations.iter().map(|row| row.op_key.clone()))
        .chain(approvals.iter().map(|row| row.op_key.clone()))
        .chain(
            finance
                .into_iter()
                .flat_map(|review| review.suspected.iter().map(|row| row.op_key.clone())),
        )
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Suspected doubles and exposure over the finance window ending at the instant.
async fn finance_review(
    tx: &mut crate::ledger::LedgerTransaction<'_>,
    settings: &PollSettings,
) -> Result<FinanceReview, LedgerError> {
    let since = settings.at.unwrap_or_else(Utc::now) - chrono::Duration::days(FINANCE_DAYS);
    Ok(FinanceReview {
        at: settings.at,
        read_at: Utc::now(),
        since: Some(since),
        suspected: finance::suspected(&mut *tx, settings.at, Some(since)).await?,
        exposure: finance::exposure(&mut *tx, settings.at, Some(since)).await?,
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::wake_poll_at;

    #[test]
    fn a_wake_up_waits_for_the_burst_to_settle() {
        let start = Instant::now();
        let now = start + Duration::from_secs(10);
        assert_eq!(
            wake_poll_at(start, now, Duration::from_secs(2)),
            now + Duration::from_millis(150)
        );
    }

    #[test]
    fn wake_ups_keep_a_quarter_interval_apart_but_never_more_than_a_second() {
        let start = Instant::now();
        let now = start + Duration::from_millis(10);
        assert_eq!(
            wake_poll_at(start, now, Duration::from_secs(2)),
            start + Duration::from_millis(500)
        );
        for interval in [60, 300] {
            assert_eq!(
                wake_poll_at(start, now, Duration::from_secs(interval)),
                start + Duration::from_secs(1),
                "interval {interval} s"
            );
        }
    }

    #[test]
    fn short_intervals_still_keep_a_quarter_second_between_polls() {
        let start = Instant::now();
        let now = start + Duration::from_millis(10);
        assert_eq!(
            wake_poll_at(start, now, Duration::from_millis(250)),
            start + Duration::from_millis(250)
        );
    }
}
