//! The ledger on a Patroni cluster, as its users run PostgreSQL to fail
//! over: etcd and three nodes under Patroni with `synchronous_mode`
//! (tests/common/patroni.rs; docs/patroni/cluster.sh starts the same one).
//!
//! Simulated agents run the whole protocol (begin, dispatch, the provider
//! call over HTTP, complete) as tests/failover.rs's do, each through one
//! pool on the cluster's URL — every node, `target_session_attrs=read-write`
//! — while the leader moves: handed over by `patronictl switchover`, or its
//! node killed outright (Patroni and PostgreSQL, SIGKILL), so that its key
//! in etcd expires and Patroni fails over. Nobody tells the agents where the
//! leader went: their pools find it, and they retry under their keys. Then,
//! from the fake provider's own records and the new leader's ledger: the
//! synchronous standby took over, nothing acknowledged was lost, no key
//! reached the provider twice, and every effect whose completion could not
//! be written while the leader was away is succeeded (its completion
//! retried), unknown or dispatched for the reconciler — never failed, never
//! missing.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::patroni::PatroniCluster;
use effectwatch::fakeprovider::FakeProvider;
use effectwatch::ledger::writer::{
    Completion, Outcome, begin_and_dispatch, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{self, ConnectSettings, Decision, LedgerPool};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};

const AGENTS: usize = 4;
/// What an agent leaves between two keys: enough effects to cross the
/// leader's move, not so many that the writers starve Patroni of 2 CPUs.
const PACE: Duration = Duration::from_millis(20);
/// The leader moves once this many effects have completed; the run ends
/// once as many more have completed on the new leader.
const COMPLETIONS_BEFORE: usize = 40;
const COMPLETIONS_AFTER: usize = 40;
/// How long one key may wait for a leader before the test gives up.
const KEY_TIMEOUT: Duration = Duration::from_secs(60);

/// The two ways a writer starts an effect: both must cross the leader's move.
#[derive(Debug, Clone, Copy)]
enum Protocol {
    /// `begin_effect`, then `mark_dispatched`.
    BeginThenClaim,
    /// `begin_and_dispatch`: one round trip.
    BeginAndDispatch,
}

/// What the ledger told the agents, and what they could not get written.
#[derive(Default)]
struct Record {
    /// Every key an agent ran: each got one answer from `begin` at least.
    ran: Mutex<BTreeSet<String>>,
    /// Acknowledged: `proceed`, the claim to dispatch, the completion.
    proceeded: Mutex<BTreeSet<String>>,
    claimed: Mutex<BTreeSet<String>>,
    completed: Mutex<BTreeSet<String>>,
    /// Performed by the provider, and the completion call failed.
    completion_failed: Mutex<BTreeSet<String>>,
    failed_calls: AtomicUsize,
    /// For each key that met a failure: from its first failed call to the
    /// call that went through.
    waits: Mutex<Vec<Duration>>,
}

/// One key through the protocol; an error is the leader going away.
async fn settle_one(
    pool: &LedgerPool,
    http: &reqwest::Client,
    provider: &str,
    key: &str,
    protocol: Protocol,
    record: &Record,
) -> Result<(), String> {
    let intent = common::intent(key, &format!("invoice:{key}"));
    let (decision, claimed) = match protocol {
        Protocol::BeginThenClaim => {
            let begun = begin_effect(pool, &intent)
                .await
                .map_err(|e| e.to_string())?;
            record.ran.lock().unwrap().insert(key.to_string());
            if begun.decision == Decision::Proceed {
                record.proceeded.lock().unwrap().insert(key.to_string());
                let claim = mark_dispatched(pool, key, None, "agent")
                    .await
                    .map_err(|e| e.to_string())?;
                (begun.decision, claim.claimed)
            } else {
                (begun.decision, false)
            }
        }
        Protocol::BeginAndDispatch => {
            let started = begin_and_dispatch(pool, &intent, "agent", false, None)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{key}: refused"))?;
            record.ran.lock().unwrap().insert(key.to_string());
            if started.begun.decision == Decision::Proceed {
                record.proceeded.lock().unwrap().insert(key.to_string());
            }
            (started.begun.decision, started.dispatched)
        }
    };
    match decision {
        Decision::Proceed => {}
        Decision::Replay | Decision::Stop => return Ok(()),
        // Begun or dispatched before, its answer lost with the leader: ask
        // the provider, as the reconciler would, and never call it again.
        Decision::InFlight => {
            let found: Value = http
                // Keys here are plain: no escaping needed in the query.
                .get(format!("{provider}/v1/effects?idempotency_key={key}"))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            if let Some(id) = found["data"][0]["id"].as_str() {
                succeeded(pool, key, Some(id), record).await?;
            }
            return Ok(());
        }
        other => return Err(format!("{key}: unexpected {other:?}")),
    }
    if !claimed {
        return Ok(());
    }
    record.claimed.lock().unwrap().insert(key.to_string());
    let created: Value = http
        .post(format!("{provider}/v1/effects"))
        .header("Idempotency-Key", key)
        .json(
            &json!({"kind": "refund", "amount_minor": 1200, "currency": "EUR",
                      "target": format!("invoice:{key}")}),
        )
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    succeeded(pool, key, created["id"].as_str(), record).await
}

/// Records the provider's answer; a completion that could not be written
/// is noted, and the key is run again.
async fn succeeded(
    pool: &LedgerPool,
    key: &str,
    external_ref: Option<&str>,
    record: &Record,
) -> Result<(), String> {
    let completion = Completion {
        external_ref: external_ref.map(str::to_string),
        ..Completion::default()
    };
    if let Err(error) = complete_effect(pool, key, Outcome::Succeeded, &completion).await {
        record
            .completion_failed
            .lock()
            .unwrap()
            .insert(key.to_string());
        return Err(error.to_string());
    }
    record.completed.lock().unwrap().insert(key.to_string());
    Ok(())
}

/// An agent: one pool on every node for its whole life, its keys in turn
/// until told to stop, each retried under the same key until the ledger
/// answers. Returns its pool, to say where it ended up.
async fn agent(
    index: usize,
    url: String,
    provider: String,
    record: Arc<Record>,
    stop: Arc<AtomicBool>,
) -> LedgerPool {
    let protocol = if index.is_multiple_of(2) {
        Protocol::BeginThenClaim
    } else {
        Protocol::BeginAndDispatch
    };
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut settings = ConnectSettings::new(url);
    settings.connect_timeout = Duration::from_secs(2);
    let pool = ledger::connect(&settings)
        .await
        .unwrap_or_else(|e| panic!("agent {index} connecting: {e}"));
    let mut k = 0;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("refund:A{index}-{k}:v1");
        let started = Instant::now();
        let mut first_failure: Option<Instant> = None;
        loop {
            match settle_one(&pool, &http, &provider, &key, protocol, &record).await {
                Ok(()) => break,
                Err(error) => {
                    record.failed_calls.fetch_add(1, Ordering::Relaxed);
                    first_failure.get_or_insert_with(Instant::now);
                    assert!(
                        started.elapsed() < KEY_TIMEOUT,
                        "{key}: no leader took it for {KEY_TIMEOUT:?}; last error: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        if let Some(at) = first_failure {
            record.waits.lock().unwrap().push(at.elapsed());
        }
        k += 1;
        tokio::time::sleep(PACE).await;
    }
    pool
}

/// Waits until the agents have completed `count` effects in all.
async fn completions(record: &Record, count: usize) {
    let started = Instant::now();
    while record.completed.lock().unwrap().len() < count {
        assert!(
            started.elapsed() < KEY_TIMEOUT,
            "the agents stalled at {} completions",
            record.completed.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What moves the leader while the agents write.
#[derive(Debug, Clone, Copy)]
enum Disruption {
    /// `patronictl switchover` to the synchronous standby.
    Switchover,
    /// The leader's Patroni and PostgreSQL killed: a failover after `ttl`.
    LeaderKilled,
}

/// Runs the agents across `disruption` on a cluster of three nodes and
/// checks what they were told against the provider and the new leader.
/// None where the cluster cannot be started here (said on stderr).
async fn writers_across(disruption: Disruption) -> Option<()> {
    let began = Instant::now();
    let mut cluster = PatroniCluster::start(3).await?;
    let cluster_up = began.elapsed();
    let leader = cluster.leader().await.expect("a leader");
    common::execute(
        &cluster.node_url(&leader, "postgres"),
        "create database ledger",
    )
    .await;
    // Migrated as writers reach the ledger: through the URL of every node.
    let migrated = common::effectwatch_cli(&["migrate", "--database-url", &cluster.url("ledger")]);
    assert!(migrated.status.success(), "{migrated:?}");

    let (fake, provider) = FakeProvider::start().await.unwrap();
    let record = Arc::new(Record::default());
    let stop = Arc::new(AtomicBool::new(false));
    let agents: Vec<_> = (0..AGENTS)
        .map(|index| {
            tokio::spawn(agent(
                index,
                cluster.url("ledger"),
                provider.clone(),
                record.clone(),
                stop.clone(),
            ))
        })
        .collect();

    completions(&record, COMPLETIONS_BEFORE).await;
    let change = match disruption {
        Disruption::Switchover => cluster.switchover().await,
        Disruption::LeaderKilled => cluster.kill_leader().await,
    };
    let completed_at_change = record.completed.lock().unwrap().len();
    completions(&record, completed_at_change + COMPLETIONS_AFTER).await;
    stop.store(true, Ordering::Relaxed);
    let mut pools = Vec::new();
    for agent in agents {
        pools.push(agent.await.unwrap());
    }
    // Every agent's pool left the old leader for the new one by itself.
    let new_leader = cluster.server_name(&change.to, "ledger");
    for (index, pool) in pools.iter().enumerate() {
        assert_eq!(pool.server(), new_leader, "agent {index}");
        assert!(pool.switches() >= 1, "agent {index} never switched");
    }

    // What the new leader holds, key by key: (state, dispatched).
    let mut on_leader = PgConnection::connect(&cluster.node_url(&change.to, "ledger"))
        .await
        .unwrap();
    let held: BTreeMap<String, (String, bool)> = sqlx::query_as::<_, (String, String, bool)>(
        "select op_key, state::text, dispatched_at is not null from ledger.effects",
    )
    .fetch_all(&mut on_leader)
    .await
    .unwrap()
    .into_iter()
    .map(|(key, state, dispatched)| (key, (state, dispatched)))
    .collect();
    let with = |wanted: &dyn Fn(&str, bool) -> bool| -> BTreeSet<String> {
        held.iter()
            .filter(|(_, (state, dispatched))| wanted(state, *dispatched))
            .map(|(key, _)| key.clone())
            .collect()
    };
    let all = with(&|_, _| true);
    let dispatched = with(&|_, dispatched| dispatched);
    let succeeded = with(&|state, _| state == "succeeded");

    let ran = record.ran.lock().unwrap().clone();
    let missing: Vec<&String> = ran.difference(&all).collect();
    assert!(
        missing.is_empty(),
        "keys the ledger answered, missing: {missing:?}"
    );
    let mut lost: BTreeSet<String> = BTreeSet::new();
    lost.extend(record.proceeded.lock().unwrap().difference(&all).cloned());
    lost.extend(
        record
            .claimed
            .lock()
            .unwrap()
            .difference(&dispatched)
            .cloned(),
    );
    lost.extend(
        record
            .completed
            .lock()
            .unwrap()
            .difference(&succeeded)
            .cloned(),
    );
    assert!(lost.is_empty(), "acknowledged, then lost: {lost:?}");

    let performed = fake.effects();
    let twice: Vec<&String> = ran
        .iter()
        .filter(|key| fake.requests_with_key(key) > 1)
        .collect();
    assert!(twice.is_empty(), "sent to the provider twice: {twice:?}");
    let unrecorded: Vec<String> = performed
        .iter()
        .filter_map(|effect| effect.idempotency_key.clone())
        .filter(|key| !dispatched.contains(key))
        .collect();
    assert!(
        unrecorded.is_empty(),
        "performed, not recorded as dispatched: {unrecorded:?}"
    );
    let failed = with(&|state, _| state == "failed");
    assert!(failed.is_empty(), "failed: {failed:?}");

    // A completion that could not be written is retried, or the effect
    // waits, dispatched, for the reconciler: never failed, never missing.
    let completion_failed = record.completion_failed.lock().unwrap().clone();
    for key in &completion_failed {
        let state = held
            .get(key)
            .map(|(state, dispatched)| (state.as_str(), *dispatched));
        assert!(
            matches!(state, Some(("succeeded" | "unknown" | "pending", true))),
            "{key}, its completion not written at first, is now {state:?}"
        );
    }
    let open = |dispatched: bool| {
        held.values()
            .filter(|(state, was)| (state == "pending" || state == "unknown") && *was == dispatched)
            .count()
    };
    let waits = record.waits.lock().unwrap().clone();
    let longest_wait = waits.iter().max().copied().unwrap_or_default();

    // The cluster mends: the old leader rejoins as a replica (the dead
    // one once started again, on the data it had), never writable.
    let mending = Instant::now();
    if let Disruption::LeaderKilled = disruption {
        cluster.restart(&change.from);
    }
    cluster
        .wait_until_healthy(Duration::from_secs(60), "the run")
        .await;
    let mut old_leader = PgConnection::connect(&cluster.node_url(&change.from, "ledger"))
        .await
        .unwrap();
    let read_only: bool = sqlx::query_scalar("select pg_is_in_recovery()")
        .fetch_one(&mut old_leader)
        .await
        .unwrap();
    assert!(
        read_only,
        "the old leader {} came back writable",
        change.from
    );
    eprintln!(
        "patroni, {disruption:?}: the lead moved {} -> {} in {:.1} s ({})\n  \
         {} effects begun, {} performed by the provider, {} succeeded; \
         open for the reconciler: {} dispatched, {} begun only\n  \
         {} calls failed, on {} keys; the longest a writer waited for a leader: {:.1} s\n  \
         completions not written at first: {}, each retried or left dispatched\n  \
         0 acknowledged lost, 0 sent twice, 0 failed; \
         cluster up in {:.1} s, the old leader back as a replica {:.1} s after the run",
        change.from,
        change.to,
        change.took.as_secs_f64(),
        match disruption {
            Disruption::Switchover => "patronictl until the new leader runs",
            Disruption::LeaderKilled => "the kill until the new leader runs",
        },
        all.len(),
        performed.len(),
        succeeded.len(),
        open(true),
        open(false),
        record.failed_calls.load(Ordering::Relaxed),
        waits.len(),
        longest_wait.as_secs_f64(),
        completion_failed.len(),
        cluster_up.as_secs_f64(),
        mending.elapsed().as_secs_f64(),
    );
    Some(())
}

#[tokio::test]
async fn writers_lose_nothing_and_dispatch_nothing_twice_across_a_patroni_switchover() {
    writers_across(Disruption::Switchover).await;
}

#[tokio::test]
async fn writers_lose_nothing_and_dispatch_nothing_twice_when_the_leaders_node_dies() {
    writers_across(Disruption::LeaderKilled).await;
}
