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
//!
//! The same agents through `patronictl failover` to the synchronous
//! standby, and through the leader's Patroni hung (SIGSTOP) while its
//! PostgreSQL runs on as the primary until the woken Patroni demotes it.
//!
//! Then the writers we ship, through a switchover, asserted the same way:
//! the Python client, its wheel installed in a virtual environment, with
//! agents on threads (tests/patroni/python_agents.py); the TypeScript
//! client, its `npm pack` tarball installed in a clean project, with agents
//! on async tasks (tests/patroni/typescript_agents.mjs); and a real
//! `effectwatch gateway` on the cluster's URL in front of `effectwatch
//! mcp-tools`, called by an MCP client; and both at once with the leader
//! killed while every provider call is out, so that each answer comes back
//! with no leader and its completion must be tried again until the failover.
//! Then a reconciler's leases taken on a leader whose node then dies: held
//! on the new leader for their term, by the ledger's clock, and no longer.
//! Last (#44): the agents through a replica lagging, then asked to lead (an
//! asynchronous one past `maximum_lag_on_failover`, which Patroni refuses;
//! the synchronous standby behind in its replay, which it promotes, taking
//! writes once caught up); two real consoles in pseudo-terminals reading
//! replicas through a switchover; and a real `effectwatch reconcile`
//! process settling through one.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::patroni::{LeaderChange, PatroniCluster};
use effectwatch::fakeprovider::FakeProvider;
use effectwatch::ledger::writer::{
    Completion, Outcome, begin_and_dispatch, begin_effect, complete_effect, mark_dispatched,
};
use effectwatch::ledger::{self, ConnectSettings, Decision, LedgerPool};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};

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
    /// The longest any key took, from its first call to its last.
    slowest: Mutex<Duration>,
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
        {
            let mut slowest = record.slowest.lock().unwrap();
            *slowest = (*slowest).max(started.elapsed());
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

/// A cluster of three nodes with a migrated ledger in database `ledger`,
/// and how long the cluster took to come up. None where the cluster cannot
/// be started here (said on stderr).
async fn ledger_cluster() -> Option<(PatroniCluster, Duration)> {
    let began = Instant::now();
    let cluster = PatroniCluster::start(3).await?;
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
    Some((cluster, cluster_up))
}

/// What `node` (the leader) holds, key by key: (state, dispatched).
async fn held_on(cluster: &PatroniCluster, node: &str) -> BTreeMap<String, (String, bool)> {
    let mut on_leader = PgConnection::connect(&cluster.node_url(node, "ledger"))
        .await
        .unwrap();
    sqlx::query_as::<_, (String, String, bool)>(
        "select op_key, state::text, dispatched_at is not null from ledger.effects",
    )
    .fetch_all(&mut on_leader)
    .await
    .unwrap()
    .into_iter()
    .map(|(key, state, dispatched)| (key, (state, dispatched)))
    .collect()
}

/// What moves the leader while the agents write.
#[derive(Debug, Clone, Copy)]
enum Disruption {
    /// `patronictl switchover` to the synchronous standby.
    Switchover,
    /// The leader's Patroni and PostgreSQL killed: a failover after `ttl`.
    LeaderKilled,
    /// The leader's postmaster killed (SIGKILL), its Patroni alive: started
    /// again in place, after crash recovery.
    PostmasterKilled,
    /// `patronictl failover --candidate <the synchronous standby> --force`.
    Failover,
    /// The leader's Patroni stopped (SIGSTOP), its PostgreSQL left running
    /// as the primary: its key expires after `ttl` and the standby leads
    /// while the old primary still answers; then woken (SIGCONT), it must
    /// demote its PostgreSQL.
    PatroniStopped,
    /// An asynchronous replica's WAL receiver stalled past Patroni's
    /// `maximum_lag_on_failover`, and the lead asked onto it (`patronictl
    /// failover` and `switchover --candidate`); then the synchronous
    /// standby held back in its replay by a report it serves, and the
    /// lead switched over to it while it lags.
    LaggingReplica,
}

/// How long a stopped Patroni stays stopped once the new leader runs: the
/// old primary still answers its writers, whose commits now wait for a
/// synchronous standby that has left it. Longer than the writers'
/// statement_timeout (10 s), which does not end a commit's wait for its
/// standby (PostgreSQL disarms it before the commit): nothing the old
/// primary commits from then on is acknowledged until it is demoted.
const STOPPED_PAST_PROMOTION: Duration = Duration::from_secs(11);

/// Runs the agents across `disruption` on a cluster of three nodes and
/// checks what they were told against the provider and the new leader.
/// None where the cluster cannot be started here (said on stderr).
async fn writers_across(disruption: Disruption) -> Option<()> {
    let (mut cluster, cluster_up) = ledger_cluster().await?;
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
    // Patroni stopped: what the agents completed while the new leader ran
    // and the old primary, not yet demoted, still answered them.
    let mut stalled_on_old_primary: Option<usize> = None;
    let mut lagging: Option<String> = None;
    let change = match disruption {
        Disruption::Switchover => cluster.switchover().await,
        Disruption::LeaderKilled => cluster.kill_leader().await,
        Disruption::PostmasterKilled => cluster.kill_leaders_postmaster().await,
        Disruption::Failover => cluster.failover().await,
        Disruption::PatroniStopped => {
            let change = cluster.stop_leaders_patroni().await;
            let completed = record.completed.lock().unwrap().len();
            tokio::time::sleep(STOPPED_PAST_PROMOTION).await;
            stalled_on_old_primary = Some(record.completed.lock().unwrap().len() - completed);
            cluster.resume(&change.from);
            change
        }
        Disruption::LaggingReplica => {
            let (change, figures) = lagging_replica_asked_to_lead(&mut cluster).await;
            lagging = Some(figures);
            change
        }
    };
    let completed_at_change = record.completed.lock().unwrap().len();
    completions(&record, completed_at_change + COMPLETIONS_AFTER).await;
    stop.store(true, Ordering::Relaxed);
    let mut pools = Vec::new();
    for agent in agents {
        pools.push(agent.await.unwrap());
    }
    // Every agent's pool left the old leader for the new one by itself
    // (a leader started again in place is the same server).
    let new_leader = cluster.server_name(&change.to, "ledger");
    for (index, pool) in pools.iter().enumerate() {
        assert_eq!(pool.server(), new_leader, "agent {index}");
        assert!(
            change.from == change.to || pool.switches() >= 1,
            "agent {index} never switched"
        );
    }

    let held = held_on(&cluster, &change.to).await;
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
    // A leader started again in place leads on; one that lost the lead
    // never comes back writable.
    assert!(
        read_only || change.from == change.to,
        "the old leader {} came back writable",
        change.from
    );
    let mut completion_ended: BTreeMap<&str, usize> = BTreeMap::new();
    for key in &completion_failed {
        let state = held.get(key).map_or("missing", |(state, _)| state.as_str());
        *completion_ended.entry(state).or_default() += 1;
    }
    let stalled = stalled_on_old_primary
        .map(|n| {
            format!(
                "\n  its Patroni stopped {} s past the promotion: {n} completions acknowledged \
                 meanwhile (each found succeeded on the new leader), the slowest key waiting \
                 until the demotion",
                STOPPED_PAST_PROMOTION.as_secs()
            )
        })
        .unwrap_or_default();
    let lagging = lagging
        .map(|figures| format!("\n  {figures}"))
        .unwrap_or_default();
    eprintln!(
        "patroni, {disruption:?}: the lead moved {} -> {} in {:.1} s ({})\n  \
         {} effects begun, {} performed by the provider, {} succeeded; \
         open for the reconciler: {} dispatched, {} begun only\n  \
         {} calls failed, on {} keys; the longest a writer waited for a leader: {:.1} s; \
         the slowest key: {:.1} s\n  \
         completions not written at first: {}, ended {completion_ended:?}{stalled}{lagging}\n  \
         0 acknowledged lost, 0 sent twice, 0 failed; \
         cluster up in {:.1} s, the old leader back as a replica {:.1} s after the run",
        change.from,
        change.to,
        change.took.as_secs_f64(),
        match disruption {
            Disruption::Switchover => "patronictl until the new leader runs",
            Disruption::Failover => "patronictl failover until the new leader runs",
            Disruption::LeaderKilled => "the kill until the new leader runs",
            Disruption::PostmasterKilled => "the kill until a leader takes writes again",
            Disruption::PatroniStopped => "SIGSTOP until the new leader runs",
            Disruption::LaggingReplica => {
                "patronictl switchover until the lagging standby takes writes"
            }
        },
        all.len(),
        performed.len(),
        succeeded.len(),
        open(true),
        open(false),
        record.failed_calls.load(Ordering::Relaxed),
        waits.len(),
        longest_wait.as_secs_f64(),
        record.slowest.lock().unwrap().as_secs_f64(),
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

/// SIGKILL of the leader's postmaster alone: Patroni restarts it in place.
#[tokio::test]
async fn writers_lose_nothing_and_dispatch_nothing_twice_when_the_leaders_postmaster_is_killed() {
    writers_across(Disruption::PostmasterKilled).await;
}

#[tokio::test]
async fn writers_lose_nothing_and_dispatch_nothing_twice_across_a_patroni_failover() {
    writers_across(Disruption::Failover).await;
}

/// The leader's Patroni hangs (SIGSTOP) while its PostgreSQL keeps running
/// as the primary: after `ttl` the synchronous standby leads, and the old
/// primary's commits wait for a standby that has left; woken (SIGCONT), its
/// Patroni finds another leading and demotes it, ending those waits. The
/// writers, on the old primary until then, follow to the new leader.
#[tokio::test]
async fn writers_lose_nothing_and_dispatch_nothing_twice_when_the_leaders_patroni_hangs() {
    writers_across(Disruption::PatroniStopped).await;
}

/// An asynchronous replica whose WAL receiver stalled past Patroni's
/// `maximum_lag_on_failover`, then the synchronous standby lagging in its
/// replay, each asked to lead while the agents write:
/// - the replica's receiver is stopped (SIGSTOP, as behind a stalled
///   network) and WAL it never receives is written; once Patroni reports it
///   more than `maximum_lag_on_failover` behind, `patronictl failover
///   --candidate` it (which synchronous mode allows onto a node that is not
///   the synchronous standby) and `patronictl switchover --candidate` it
///   must both be refused, the leader staying where it is; its receiver is
///   then woken. (Patroni resumes a replay paused by `pg_wal_replay_pause()`
///   and resets a `recovery_min_apply_delay` set by hand, so neither makes
///   a replica lag under it.)
/// - a report on the synchronous standby reads a table the primary then
///   truncates: the standby's replay waits behind the report (up to
///   `max_standby_streaming_delay`), receiving and acknowledging
///   everything, replaying nothing. The lead is switched over to it
///   `LAG_BEFORE_SWITCH` later: Patroni, which measures a replica by what
///   it received, hands over at once, and the promoted standby takes
///   writes only once it has replayed its backlog, when the report ends.
///
/// Returns the change (`took`: from asking to the new leader taking writes)
/// and the figures.
async fn lagging_replica_asked_to_lead(cluster: &mut PatroniCluster) -> (LeaderChange, String) {
    let (leader, standby, others) = cluster.roles().await;
    let lagging = others.first().expect("an asynchronous replica").clone();
    let on_leader = cluster.node_url(&leader, "postgres");

    cluster.stall_receiver(&lagging);
    // WAL the stalled replica does not receive, beyond the agents' own.
    common::execute(
        &on_leader,
        "create table lag_filler as select repeat('x', 1000) as pad from generate_series(1, 3000)",
    )
    .await;
    let waiting = Instant::now();
    let behind = loop {
        let lag = cluster
            .members()
            .await
            .into_iter()
            .find(|member| member.name == lagging)
            .and_then(|member| member.receive_lag);
        if let Some(lag) = lag
            && lag > MAXIMUM_LAG_ON_FAILOVER
        {
            break lag;
        }
        assert!(
            waiting.elapsed() < Duration::from_secs(20),
            "Patroni never reported {lagging} beyond maximum_lag_on_failover: {:?}",
            cluster.members().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let failover = cluster.failover_to(&lagging).await;
    let switchover = cluster.switchover_to(&lagging).await;
    cluster.resume_receiver(&lagging);
    let failover_said = match failover {
        Ok(change) => panic!(
            "Patroni failed over to {lagging}, {behind} bytes behind: {change:?}\n{}",
            cluster.logs()
        ),
        Err(said) => said,
    };
    let switchover_said = match switchover {
        Ok(change) => panic!(
            "Patroni switched over to {lagging}, {behind} bytes behind: {change:?}\n{}",
            cluster.logs()
        ),
        Err(said) => said,
    };
    assert!(failover_said.contains("Failover failed"), "{failover_said}");
    assert!(
        switchover_said.contains("candidate name does not match with sync_standby"),
        "{switchover_said}"
    );
    let leader_log = cluster.patroni_log(&leader);
    assert!(
        leader_log.contains(&format!("Member {lagging} exceeds maximum replication lag")),
        "the leader's Patroni did not say why it refused: {}",
        cluster.logs()
    );
    // Under load the member list may name no running leader for a while
    // after the refusals (a leader's REST slow to answer, or its state
    // passing through another word): the lead is judged once one is named.
    let asked = Instant::now();
    let leading = loop {
        match cluster.leader().await {
            Some(name) => break Some(name),
            None if asked.elapsed() > Duration::from_secs(60) => break None,
            None => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    assert_eq!(
        leading.as_deref(),
        Some(leader.as_str()),
        "the lead moved ({:.1} s after the refusals): {:?}",
        asked.elapsed().as_secs_f64(),
        cluster.members().await
    );
    let said_line = |said: &str, wanted: &str| {
        said.lines()
            .find(|line| line.contains(wanted))
            .unwrap_or_default()
            .trim()
            .to_string()
    };

    // The synchronous standby's replay held back by a report it serves.
    common::execute(&on_leader, "create table lag_report (n int)").await;
    let on_standby = cluster.node_url(&standby, "postgres");
    let waiting = Instant::now();
    loop {
        let mut connection = PgConnection::connect(&on_standby).await.unwrap();
        let replayed: bool = sqlx::query_scalar("select to_regclass('lag_report') is not null")
            .fetch_one(&mut connection)
            .await
            .unwrap();
        if replayed {
            break;
        }
        assert!(
            waiting.elapsed() < Duration::from_secs(20),
            "{standby} never replayed the report's table"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = {
        let url = on_standby.clone();
        tokio::spawn(async move {
            let mut connection = PgConnection::connect(&url).await.unwrap();
            let started = Instant::now();
            let statement = format!(
                "select pg_sleep({}) from (select count(*) from lag_report) counted",
                REPORT_HOLDS.as_secs_f64()
            );
            let ended = sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&mut connection)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string());
            (ended, started.elapsed())
        })
    };
    // The report holds its lock before the truncation's is replayed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    common::execute(&on_leader, "truncate lag_report").await;
    tokio::time::sleep(LAG_BEFORE_SWITCH).await;
    let mut connection = PgConnection::connect(&on_standby).await.unwrap();
    let (lag_secs, lag_bytes): (f64, i64) = sqlx::query_as(
        "select coalesce(extract(epoch from now() - pg_last_xact_replay_timestamp()), 0)::float8,
                pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint",
    )
    .fetch_one(&mut connection)
    .await
    .unwrap();
    drop(connection);
    let patroni_saw = cluster
        .members()
        .await
        .into_iter()
        .find(|member| member.name == standby)
        .map(|member| {
            format!(
                "{} received, {} replayed",
                member.receive_lag.unwrap_or_default(),
                member.replay_lag.unwrap_or_default()
            )
        })
        .unwrap_or_default();
    assert!(
        lag_secs >= 1.0 && lag_bytes > 0,
        "{standby} did not lag in its replay: {lag_secs:.1} s, {lag_bytes} bytes"
    );
    let asked = Instant::now();
    let change = cluster
        .switchover_to(&standby)
        .await
        .unwrap_or_else(|said| panic!("the switchover to {standby} was refused: {said}"));
    let leading_after = change.took;
    let writable_after = cluster.wait_until_writable(&standby, asked).await;
    let (report_ended, report_took) = report.await.unwrap();
    let figures = format!(
        "{lagging}'s receiver stalled, Patroni reporting it {:.1} MiB behind (maximum_lag_on_failover \
         1 MiB): `patronictl failover --candidate {lagging}` refused ({:?}; the leader's Patroni: \
         \"{}\"), `switchover --candidate {lagging}` refused ({:?}); {leader} kept the lead\n  \
         {standby}, the synchronous standby, {lag_secs:.1} s and {:.1} MiB behind in its replay \
         (received everything; Patroni said bytes behind: {patroni_saw}): \
         `patronictl switchover` returned and Patroni called it the running leader after {:.1} s, \
         it took writes {:.1} s after the asking, once the report holding its replay back ended \
         ({}, after {:.1} s)",
        behind as f64 / f64::from(1 << 20),
        said_line(&failover_said, "failed"),
        said_line(&leader_log, "no healthy members found")
            .split_once("WARNING: ")
            .map_or(String::new(), |(_, said)| said.to_string()),
        said_line(&switchover_said, "failed"),
        lag_bytes as f64 / f64::from(1 << 20),
        leading_after.as_secs_f64(),
        writable_after.as_secs_f64(),
        match &report_ended {
            Ok(()) => "it ran its course".to_string(),
            Err(error) => format!("it was ended: {error}"),
        },
        report_took.as_secs_f64(),
    );
    (
        LeaderChange {
            took: writable_after,
            ..change
        },
        figures,
    )
}

/// Patroni's `maximum_lag_on_failover` in docs/patroni/node.yml.template.
const MAXIMUM_LAG_ON_FAILOVER: u64 = 1 << 20;
/// How long a report on the synchronous standby reads: its replay waits
/// behind it from the truncation on, through the switchover to it.
const REPORT_HOLDS: Duration = Duration::from_secs(12);
/// How long the standby lags before the switchover to it is asked.
const LAG_BEFORE_SWITCH: Duration = Duration::from_secs(4);

/// A replica lagging, then asked to lead. See `lagging_replica_asked_to_lead`.
#[tokio::test]
async fn writers_lose_nothing_and_dispatch_nothing_twice_when_a_lagging_replica_is_asked_to_lead() {
    writers_across(Disruption::LaggingReplica).await;
}

/// What a process's lines said so far: its stdout's JSON lines, its stderr.
#[derive(Default)]
struct Heard {
    lines: Mutex<Vec<Value>>,
    stderr: Mutex<Vec<String>>,
}

impl Heard {
    fn count(&self, wanted: impl Fn(&Value) -> bool) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| wanted(l))
            .count()
    }

    fn stderr_tail(&self) -> String {
        let stderr = self.stderr.lock().unwrap();
        stderr[stderr.len().saturating_sub(30)..].join("\n")
    }
}

fn told_succeeded(line: &Value) -> bool {
    line["outcome"] == "succeeded"
}

/// Waits until the script has been told `count` effects recorded, failing
/// at once on a line that says it met something else.
async fn python_told(heard: &Heard, count: usize) {
    agents_told(heard, count, "Python").await
}

/// As `python_told`, for the agents of the client named `who`.
async fn agents_told(heard: &Heard, count: usize, who: &str) {
    let started = Instant::now();
    loop {
        let errors: Vec<Value> = heard
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.get("error").is_some())
            .cloned()
            .collect();
        assert!(
            errors.is_empty(),
            "the {who} agents met: {errors:?}\n{}",
            heard.stderr_tail()
        );
        if heard.count(told_succeeded) >= count {
            return;
        }
        assert!(
            started.elapsed() < KEY_TIMEOUT,
            "the {who} agents stalled at {} effects told recorded\n{}",
            heard.count(told_succeeded),
            heard.stderr_tail()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts tests/patroni/python_agents.py with `threads` agents on `url`,
/// its lines read into a `Heard` (the task reading its stdout returned).
fn python_agents(
    venv: &std::path::Path,
    url: &str,
    provider: &str,
    threads: usize,
) -> (
    tokio::process::Child,
    Arc<Heard>,
    tokio::task::JoinHandle<()>,
) {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/patroni/python_agents.py");
    let mut command = tokio::process::Command::new(venv.join("bin/python"));
    command
        .arg(&script)
        .arg(url)
        .arg(provider)
        .arg(threads.to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .current_dir(std::env::temp_dir());
    spawn_agents(command, "Python")
}

/// Starts tests/patroni/typescript_agents.mjs, copied into `app` (the
/// project the client's tarball is installed in, as a user's script sits
/// beside its node_modules), with `tasks` agents on `url`.
fn typescript_agents(
    app: &std::path::Path,
    url: &str,
    provider: &str,
    tasks: usize,
) -> (
    tokio::process::Child,
    Arc<Heard>,
    tokio::task::JoinHandle<()>,
) {
    let script = app.join("agents.mjs");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/patroni/typescript_agents.mjs"),
        &script,
    )
    .expect("copying the TypeScript agents into the project");
    let mut command = tokio::process::Command::new("node");
    command
        .arg(&script)
        .arg(url)
        .arg(provider)
        .arg(tasks.to_string())
        .current_dir(app);
    spawn_agents(command, "TypeScript")
}

/// Starts an agents' script, its JSON lines and its stderr read into a `Heard`.
fn spawn_agents(
    mut command: tokio::process::Command,
    who: &str,
) -> (
    tokio::process::Child,
    Arc<Heard>,
    tokio::task::JoinHandle<()>,
) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting the {who} agents: {e}"));
    let heard = Arc::new(Heard::default());
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let reading = {
        let heard = heard.clone();
        let who = who.to_string();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("the {who} agents printed {line:?}: {e}"));
                heard.lines.lock().unwrap().push(value);
            }
        })
    };
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    {
        let heard = heard.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                heard.stderr.lock().unwrap().push(line);
            }
        });
    }
    (child, heard, reading)
}

const PYTHON_THREADS: usize = 4;

/// The Python client as a user runs it — its wheel installed in a virtual
/// environment, one `Ledger` shared by agents on threads, half of them
/// through the decorator, half through `ledger.effect(...)` — through a
/// switchover, the cluster's URL its only knowledge of where the leader
/// is. Each agent makes a call that raised a connection error again under
/// its key. Then, from what the script printed, the fake provider's record
/// and the new leader's ledger: every effect the script was told recorded
/// is succeeded there, no key reached the provider twice, every effect
/// performed is recorded dispatched, nothing is failed.
#[tokio::test]
async fn python_agents_on_threads_lose_nothing_and_dispatch_nothing_twice_across_a_switchover() {
    client_agents_across_a_switchover(Client::Python).await;
}

const TYPESCRIPT_TASKS: usize = 4;

/// The TypeScript client as a user runs it — `npm pack`'s tarball installed
/// in a clean project, one `Ledger` shared by agents on concurrent async
/// tasks, half through `ledger.wrap`, half through `ledger.effect(...)`
/// (tests/patroni/typescript_agents.mjs) — through a switchover, on the
/// cluster's URL of every node with `target_session_attrs=read-write`,
/// which the client splits and follows itself (node-postgres knows neither).
/// Asserted as the Python agents are.
#[tokio::test]
async fn typescript_agents_on_async_tasks_lose_nothing_and_dispatch_nothing_twice_across_a_switchover()
 {
    client_agents_across_a_switchover(Client::TypeScript).await;
}

/// A client we ship, run by an agents' script.
#[derive(Debug, Clone, Copy)]
enum Client {
    Python,
    TypeScript,
}

/// The `client`'s agents through a switchover. Then, from what the script
/// printed, the fake provider's record and the new leader's ledger: every
/// effect the script was told recorded is succeeded there, no key reached
/// the provider twice, every effect performed is recorded dispatched,
/// nothing is failed.
async fn client_agents_across_a_switchover(client: Client) {
    let (who, writers) = match client {
        Client::Python => ("Python", PYTHON_THREADS),
        Client::TypeScript => ("TypeScript", TYPESCRIPT_TASKS),
    };
    let present = match client {
        Client::Python => common::toolchain::present(&["python3"], "Python"),
        Client::TypeScript => common::toolchain::present(&["node", "npm"], "TypeScript"),
    };
    if !present {
        return;
    }
    let began = Instant::now();
    // The client is built and installed, as a user installs it, while the
    // cluster starts: the Python wheel in a venv, the TypeScript tarball in
    // a clean project.
    let installed = tokio::task::spawn_blocking(move || {
        let began = Instant::now();
        let installed = match client {
            Client::Python => common::python_client::fresh_venv(
                std::path::Path::new("python3"),
                "patroni-python",
                "",
            ),
            Client::TypeScript => common::typescript_client::packed_install("patroni-typescript"),
        };
        (installed, began.elapsed())
    });
    let Some((cluster, cluster_up)) = ledger_cluster().await else {
        return;
    };
    let (installed, install_took) = installed.await.unwrap();
    let (fake, provider) = FakeProvider::start().await.unwrap();
    let url = cluster.url("ledger");
    let (mut child, heard, reading) = match client {
        Client::Python => python_agents(&installed, &url, &provider, writers),
        Client::TypeScript => typescript_agents(&installed, &url, &provider, writers),
    };

    let run = Instant::now();
    agents_told(&heard, COMPLETIONS_BEFORE, who).await;
    let change = cluster.switchover().await;
    let at_change = heard.count(told_succeeded);
    agents_told(&heard, at_change + COMPLETIONS_AFTER, who).await;
    // Closing its stdin stops the agents, each once its key is done.
    drop(child.stdin.take());
    let status = tokio::time::timeout(KEY_TIMEOUT, child.wait())
        .await
        .unwrap_or_else(|_| panic!("the {who} agents did not stop"))
        .unwrap();
    reading.await.unwrap();
    let run_took = run.elapsed();
    agents_told(&heard, 0, who).await;
    assert!(
        status.success(),
        "the {who} agents ended {status}\n{}",
        heard.stderr_tail()
    );

    let held = held_on(&cluster, &change.to).await;
    let lines = heard.lines.lock().unwrap().clone();
    let key_of = |line: &Value| line["key"].as_str().unwrap().to_string();
    let recorded: BTreeSet<String> = lines
        .iter()
        .filter(|l| told_succeeded(l))
        .map(key_of)
        .collect();
    let in_flight: BTreeSet<String> = lines
        .iter()
        .filter(|line| line["told"] == "in_flight")
        .map(key_of)
        .collect();
    let lost: Vec<&String> = recorded
        .iter()
        .filter(|key| held.get(*key).map(|(state, _)| state.as_str()) != Some("succeeded"))
        .collect();
    assert!(lost.is_empty(), "told recorded, then lost: {lost:?}");
    let performed = fake.effects();
    let performed_keys: BTreeSet<String> = performed
        .iter()
        .filter_map(|effect| effect.idempotency_key.clone())
        .collect();
    // Told in flight: a first try's claim (or completion) went through
    // with its reply lost, and it waits, dispatched, for the reconciler;
    // or, on the by-hand path's two calls, a first try's begin went
    // through and its claim did not: pending, never sent, which the
    // provider must not hold either.
    for key in &in_flight {
        let state = held
            .get(key)
            .map(|(state, dispatched)| (state.as_str(), *dispatched));
        let waiting = matches!(state, Some(("pending" | "unknown", true)))
            || (state == Some(("pending", false)) && !performed_keys.contains(key));
        assert!(waiting, "{key}, told in flight, is {state:?}");
    }
    assert_eq!(
        performed_keys.len(),
        performed.len(),
        "an effect without its key"
    );
    let twice: Vec<&String> = performed_keys
        .iter()
        .filter(|key| fake.requests_with_key(key) > 1)
        .collect();
    assert!(twice.is_empty(), "sent to the provider twice: {twice:?}");
    let unrecorded: Vec<&String> = performed_keys
        .iter()
        .filter(|key| !held.get(*key).is_some_and(|(_, dispatched)| *dispatched))
        .collect();
    assert!(
        unrecorded.is_empty(),
        "performed, not recorded as dispatched: {unrecorded:?}"
    );
    let failed: Vec<&String> = held
        .iter()
        .filter(|(_, (state, _))| state == "failed")
        .map(|(key, _)| key)
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
    let retried = lines
        .iter()
        .filter(|line| line["retries"].as_u64().unwrap_or(0) > 0)
        .count();
    let most_retries = lines
        .iter()
        .filter_map(|line| line["retries"].as_u64())
        .max()
        .unwrap_or(0);
    // Completions the client had to send again (the ledger out of reach
    // between the provider's answer and its record), and how they ended.
    let completion_retried: BTreeSet<String> = lines
        .iter()
        .filter_map(|line| line["completion_retry"].as_str().map(str::to_string))
        .collect();
    let mut retried_ended: BTreeMap<String, usize> = BTreeMap::new();
    for key in &completion_retried {
        let state = held
            .get(key)
            .map_or("missing".to_string(), |(state, _)| state.clone());
        assert!(
            matches!(state.as_str(), "succeeded" | "unknown" | "pending"),
            "{key}, its completion sent again, is {state}"
        );
        *retried_ended.entry(state).or_default() += 1;
    }
    let longest_wait = lines
        .iter()
        .filter_map(|line| line["waited"].as_f64())
        .fold(0.0, f64::max);
    let (threads, install) = match client {
        Client::Python => ("threads", "wheel and venv"),
        Client::TypeScript => ("async tasks", "npm pack and install"),
    };
    eprintln!(
        "patroni, {who} client ({writers} {threads}, one Ledger): the lead moved {} -> {} in {:.1} s\n  \
         {} keys told recorded succeeded, {} told in flight; {} performed by the provider, \
         {} effects in the ledger\n  \
         {} keys made again after a connection error (at most {} times each); the longest a key \
         waited for a leader: {:.1} s\n  \
         completions not written at first: {}, ended {:?}\n  \
         0 acknowledged lost, 0 sent twice, 0 failed; {install} {:.1} s (beside the cluster's \
         start, {:.1} s), agents' run {:.1} s, test {:.1} s",
        change.from,
        change.to,
        change.took.as_secs_f64(),
        recorded.len(),
        in_flight.len(),
        performed.len(),
        held.len(),
        retried,
        most_retries,
        longest_wait,
        completion_retried.len(),
        retried_ended,
        install_took.as_secs_f64(),
        cluster_up.as_secs_f64(),
        run_took.as_secs_f64(),
        began.elapsed().as_secs_f64(),
    );
}

/// The gateway's policy: refunds recorded, the lookup let through.
const GATEWAY_POLICY: &str = r#"
alias = "billing"
upstream_timeout_secs = 5

[tools.refund]
action = "refund"
op_key = "refund:{order_id}:{amount_minor}"
target = "invoice:{order_id}"
params = ["order_id", "amount_minor", "currency"]
amount_minor = "amount_minor"
currency = "currency"
provider = "fakepay"
external_ref = "id"

[tools.lookup_refunds]
read_only = true
"#;

const GATEWAY_CALLERS: usize = 2;

/// What the gateway answered the callers.
#[derive(Default)]
struct Answers {
    /// Answered as a success, by key.
    succeeded: Mutex<BTreeSet<String>>,
    /// Answered with a tool error (the model is told not to call again), by key.
    tool_errors: Mutex<Vec<(String, String)>>,
    /// Calls answered with an MCP error (the ledger out of reach), made again.
    failed_calls: AtomicUsize,
    failed_messages: Mutex<BTreeSet<String>>,
    waits: Mutex<Vec<Duration>>,
}

/// The gateway's callers, each on the one MCP session, running until told
/// to stop.
struct GatewayCallers {
    answers: Arc<Answers>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl GatewayCallers {
    fn start(client: &GatewayClient) -> GatewayCallers {
        let answers = Arc::new(Answers::default());
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..GATEWAY_CALLERS)
            .map(|index| {
                tokio::spawn(gateway_caller(
                    index,
                    client.peer().clone(),
                    answers.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        GatewayCallers {
            answers,
            stop,
            tasks,
        }
    }

    /// Each caller ends after the call it is making.
    fn tell_to_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    async fn stop(self) {
        self.tell_to_stop();
        for task in self.tasks {
            task.await.unwrap();
        }
    }
}

/// One caller of the gateway: its refunds in turn until told to stop, a
/// call the gateway answered with an error made again with the same
/// arguments, as a model does when told to try again later.
async fn gateway_caller(
    index: usize,
    peer: rmcp::service::Peer<rmcp::service::RoleClient>,
    answers: Arc<Answers>,
    stop: Arc<AtomicBool>,
) {
    let mut k = 0;
    while !stop.load(Ordering::Relaxed) {
        let order_id = format!("GW{index}n{k}");
        let key = format!("refund:{order_id}:1200");
        let arguments = json!({"order_id": order_id, "amount_minor": 1200, "currency": "EUR"});
        let started = Instant::now();
        let mut first_failure: Option<Instant> = None;
        loop {
            let call = rmcp::model::CallToolRequestParams::new("refund")
                .with_arguments(arguments.as_object().cloned().unwrap());
            match peer.call_tool(call).await {
                Ok(result) if result.is_error != Some(true) => {
                    answers.succeeded.lock().unwrap().insert(key.clone());
                    break;
                }
                Ok(result) => {
                    let said: Vec<String> = result
                        .content
                        .iter()
                        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
                        .collect();
                    answers
                        .tool_errors
                        .lock()
                        .unwrap()
                        .push((key.clone(), said.join(" ")));
                    break;
                }
                Err(rmcp::ServiceError::McpError(error)) => {
                    answers.failed_calls.fetch_add(1, Ordering::Relaxed);
                    answers
                        .failed_messages
                        .lock()
                        .unwrap()
                        .insert(error.message.to_string());
                    first_failure.get_or_insert_with(Instant::now);
                    assert!(
                        started.elapsed() < KEY_TIMEOUT,
                        "{key}: the gateway found no leader for {KEY_TIMEOUT:?}; last: {}",
                        error.message
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => panic!("{key}: the gateway's session broke: {error}"),
            }
        }
        if let Some(at) = first_failure {
            answers.waits.lock().unwrap().push(at.elapsed());
        }
        k += 1;
        tokio::time::sleep(PACE).await;
    }
}

type GatewayClient =
    rmcp::service::RunningService<rmcp::service::RoleClient, rmcp::model::ClientConfig>;

/// A real `effectwatch gateway` on `url` in front of `effectwatch
/// mcp-tools --ignore-key` at `provider`, with an MCP client's session on
/// it; its stderr (its log) read into a `Heard`.
async fn gateway(url: &str, provider: &str) -> (GatewayClient, Arc<Heard>, tempfile::TempDir) {
    use rmcp::ServiceExt;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("gateway.toml");
    std::fs::write(&policy, GATEWAY_POLICY).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"));
    command
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .env_remove("DATABASE_URL");
    let (transport, stderr) = TokioChildProcess::builder(command.configure(|command| {
        command
            .args(["--database-url", url, "gateway", "--policy"])
            .arg(&policy)
            .args(["--upstream", env!("CARGO_BIN_EXE_effectwatch"), "mcp-tools"])
            .args(["--provider-url", provider, "--ignore-key"]);
    }))
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let heard = Arc::new(Heard::default());
    {
        let heard = heard.clone();
        let mut stderr = BufReader::new(stderr.unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                heard.stderr.lock().unwrap().push(line);
            }
        });
    }
    let client = rmcp::model::ClientConfig::new(
        rmcp::model::ClientCapabilities::default(),
        rmcp::model::Implementation::new("patroni-agent", "1.0"),
    )
    .serve(transport)
    .await
    .unwrap_or_else(|e| panic!("the gateway did not start: {e}\n{}", heard.stderr_tail()));
    (client, heard, dir)
}

/// A real `effectwatch gateway`, its `--database-url` the cluster's URL,
/// in front of `effectwatch mcp-tools` on stdio (told to ignore the key it
/// is passed, so that the provider's count is the gateway's doing alone),
/// called by an MCP client's callers through a switchover. Then: every
/// call answered as a success is recorded succeeded on the new leader, no
/// invoice was refunded twice at the provider, every refund performed is
/// recorded dispatched, nothing is failed.
#[tokio::test]
async fn the_mcp_gateway_loses_nothing_and_refunds_nothing_twice_across_a_switchover() {
    let began = Instant::now();
    let Some((cluster, cluster_up)) = ledger_cluster().await else {
        return;
    };
    let (fake, provider) = FakeProvider::start().await.unwrap();
    let (client, heard, _dir) = gateway(&cluster.url("ledger"), &provider).await;

    let callers = GatewayCallers::start(&client);
    let answers = callers.answers.clone();
    let answered = |count: usize| {
        let answers = answers.clone();
        let heard = heard.clone();
        async move {
            let started = Instant::now();
            while answers.succeeded.lock().unwrap().len() < count {
                assert!(
                    started.elapsed() < KEY_TIMEOUT,
                    "the gateway's callers stalled at {} successes\n{}",
                    answers.succeeded.lock().unwrap().len(),
                    heard.stderr_tail()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let run = Instant::now();
    answered(COMPLETIONS_BEFORE).await;
    let change = cluster.switchover().await;
    let at_change = answers.succeeded.lock().unwrap().len();
    answered(at_change + COMPLETIONS_AFTER).await;
    callers.stop().await;
    let run_took = run.elapsed();
    // The gateway records a success beside its reply: once the session
    // ends, it finishes recording before it exits.
    client.cancel().await.unwrap();

    let succeeded = answers.succeeded.lock().unwrap().clone();
    let mut held = held_on(&cluster, &change.to).await;
    let settling = Instant::now();
    while succeeded
        .iter()
        .any(|key| held.get(key).is_some_and(|(state, _)| state == "pending"))
        && settling.elapsed() < Duration::from_secs(15)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held = held_on(&cluster, &change.to).await;
    }
    let lost: Vec<(&String, Option<&(String, bool)>)> = succeeded
        .iter()
        .map(|key| (key, held.get(key)))
        .filter(|(_, held)| held.map(|(state, _)| state.as_str()) != Some("succeeded"))
        .collect();
    assert!(
        lost.is_empty(),
        "answered as a success, not recorded succeeded: {lost:?}\n{}",
        heard.stderr_tail()
    );
    let tool_errors = answers.tool_errors.lock().unwrap().clone();
    for (key, said) in &tool_errors {
        let state = held
            .get(key)
            .map(|(state, dispatched)| (state.as_str(), *dispatched));
        assert!(
            matches!(state, Some(("pending" | "unknown", true))),
            "{key}, answered {said:?}, is {state:?}"
        );
    }
    let performed = fake.effects();
    let mut per_target: BTreeMap<String, usize> = BTreeMap::new();
    for effect in &performed {
        *per_target
            .entry(effect.target.clone().expect("a refund's target"))
            .or_default() += 1;
    }
    let twice: Vec<(&String, &usize)> = per_target.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "refunded twice at the provider: {twice:?}"
    );
    let unrecorded: Vec<&String> = per_target
        .keys()
        .filter(|target| {
            let key = format!("refund:{}:1200", target.trim_start_matches("invoice:"));
            !held.get(&key).is_some_and(|(_, dispatched)| *dispatched)
        })
        .collect();
    assert!(
        unrecorded.is_empty(),
        "refunded, not recorded as dispatched: {unrecorded:?}"
    );
    let failed: Vec<&String> = held
        .iter()
        .filter(|(_, (state, _))| state == "failed")
        .map(|(key, _)| key)
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
    let waits = answers.waits.lock().unwrap().clone();
    let open = held
        .values()
        .filter(|(state, _)| state == "pending" || state == "unknown")
        .count();
    eprintln!(
        "patroni, MCP gateway ({GATEWAY_CALLERS} callers, one stdio session): the lead moved {} -> {} in {:.1} s\n  \
         {} calls answered as a success, {} with a tool error {:?}; {} refunds at the provider, \
         {} effects in the ledger, {} open\n  \
         {} calls answered with the ledger out of reach, on {} keys, made again; the longest a caller \
         waited: {:.1} s; what it was told: {:?}\n  \
         0 acknowledged lost, 0 refunded twice, 0 failed; cluster up in {:.1} s, callers' run {:.1} s, \
         test {:.1} s",
        change.from,
        change.to,
        change.took.as_secs_f64(),
        succeeded.len(),
        tool_errors.len(),
        tool_errors,
        performed.len(),
        held.len(),
        open,
        answers.failed_calls.load(Ordering::Relaxed),
        waits.len(),
        waits
            .iter()
            .max()
            .copied()
            .unwrap_or_default()
            .as_secs_f64(),
        answers.failed_messages.lock().unwrap(),
        cluster_up.as_secs_f64(),
        run_took.as_secs_f64(),
        began.elapsed().as_secs_f64(),
    );
}

/// How long the fake provider takes to answer while the leader is killed:
/// every writer's call is out at the kill, and its answer comes back while
/// the leader is away (a failover takes `ttl`, 20 s).
const SLOW_PROVIDER: Duration = Duration::from_secs(3);
const KILL_PYTHON_THREADS: usize = 2;

/// The effect's key at the fake provider: the Python agents send theirs;
/// the gateway's tool server is told to ignore it, so it is made again
/// from the target, as the gateway's policy makes it.
fn key_at_provider(effect: &effectwatch::fakeprovider::FakeEffect) -> String {
    let target = effect.target.clone().expect("a refund's target");
    match effect.idempotency_key.clone() {
        Some(key) => key,
        None => format!("refund:{}:1200", target.trim_start_matches("invoice:")),
    }
}

/// The leader killed exactly between the provider's answers and their
/// completions: the fake provider made slow, so that every writer's call
/// — Python agents on threads (the client's default `completion_retry_for`,
/// 30 s) and a real gateway's callers — is out when the leader's node dies.
/// The answers come back with no leader; the writers keep them and try the
/// completion again until Patroni fails over (`ttl`). Then, on the new
/// leader: every effect the provider performed is `succeeded` (the calls
/// out at the kill among them), none left dispatched for want of its
/// completion unless the writer's log said it gave up past its bound, none
/// sent twice, none failed.
#[tokio::test]
async fn completions_outlast_a_leader_killed_while_the_provider_answers() {
    use effectwatch::fakeprovider::{Fault, Route};
    if !common::toolchain::present(&["python3"], "Python") {
        return;
    }
    let began = Instant::now();
    // Its own environment: the switchover test makes `patroni-python` anew
    // at the same time.
    let venv = tokio::task::spawn_blocking(|| {
        common::python_client::fresh_venv(
            std::path::Path::new("python3"),
            "patroni-python-kill",
            "",
        )
    });
    let Some((mut cluster, cluster_up)) = ledger_cluster().await else {
        return;
    };
    let venv = venv.await.unwrap();
    let (fake, provider) = FakeProvider::start().await.unwrap();
    let url = cluster.url("ledger");
    let (mut child, python, reading) = python_agents(&venv, &url, &provider, KILL_PYTHON_THREADS);
    let (client, gateway_log, _dir) = gateway(&url, &provider).await;
    let callers = GatewayCallers::start(&client);
    let answers = callers.answers.clone();
    let both_told = |python_count: usize, gateway_count: usize| {
        let (python, answers, gateway_log) = (python.clone(), answers.clone(), gateway_log.clone());
        async move {
            let started = Instant::now();
            loop {
                python_told(&python, 0).await;
                if python.count(told_succeeded) >= python_count
                    && answers.succeeded.lock().unwrap().len() >= gateway_count
                {
                    return;
                }
                assert!(
                    started.elapsed() < KEY_TIMEOUT,
                    "the writers stalled: Python {} told recorded, gateway {} successes\n{}\n{}",
                    python.count(told_succeeded),
                    answers.succeeded.lock().unwrap().len(),
                    python.stderr_tail(),
                    gateway_log.stderr_tail()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    both_told(4, 4).await;

    // The provider slows down; once every writer's call is out, the leader dies.
    let writers = KILL_PYTHON_THREADS + GATEWAY_CALLERS;
    let before = fake.effects().len();
    fake.set_fault(Route::Create, Some(Fault::Slow(SLOW_PROVIDER)));
    // Half the provider's delay: each writer's call made before the fault
    // has been answered, and its next one is out (a pause of 20 ms, a few
    // ledger round trips), with at least as long again to wait.
    tokio::time::sleep(SLOW_PROVIDER / 2).await;
    let out_at_kill: BTreeSet<String> = fake.effects()[before..]
        .iter()
        .map(key_at_provider)
        .collect();
    assert!(
        out_at_kill.len() >= writers,
        "not every writer's call reached the slowed provider: {out_at_kill:?}"
    );
    let change = cluster.kill_leader().await;
    fake.set_fault(Route::Create, None);
    let (python_at_change, gateway_at_change) = (
        python.count(told_succeeded),
        answers.succeeded.lock().unwrap().len(),
    );
    both_told(python_at_change + 4, gateway_at_change + 4).await;
    let run_took = began.elapsed();

    drop(child.stdin.take());
    callers.tell_to_stop();
    let status = tokio::time::timeout(KEY_TIMEOUT, child.wait())
        .await
        .expect("the Python agents did not stop")
        .unwrap();
    reading.await.unwrap();
    python_told(&python, 0).await;
    assert!(
        status.success(),
        "the Python agents ended {status}\n{}",
        python.stderr_tail()
    );
    callers.stop().await;
    // The gateway records a success beside its reply, and all before it exits.
    client.cancel().await.unwrap();

    let performed = fake.effects();
    let keys: Vec<String> = performed.iter().map(key_at_provider).collect();
    let mut held = held_on(&cluster, &change.to).await;
    let settling = Instant::now();
    while keys
        .iter()
        .any(|key| held.get(key).is_some_and(|(state, _)| state == "pending"))
        && settling.elapsed() < Duration::from_secs(15)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held = held_on(&cluster, &change.to).await;
    }
    let lines = python.lines.lock().unwrap().clone();
    let gateway_said = gateway_log.stderr.lock().unwrap().clone();
    // What each writer said of a completion it gave up on, past its bound.
    let gave_up = |key: &str| {
        lines.iter().any(|line| line["completion_gave_up"] == key)
            || gateway_said.iter().any(|line| {
                line.contains(&format!("the tool's answer for {key} is not recorded"))
                    && line.contains("(the bound, 30 s)")
            })
    };
    let mut per_key: BTreeMap<&String, usize> = BTreeMap::new();
    for key in &keys {
        *per_key.entry(key).or_default() += 1;
    }
    let twice: Vec<_> = per_key.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "sent to the provider twice: {twice:?}");
    let not_succeeded: Vec<(&String, Option<&(String, bool)>)> = keys
        .iter()
        .map(|key| (key, held.get(key)))
        .filter(|(_, held)| held.map(|(state, _)| state.as_str()) != Some("succeeded"))
        .collect();
    let unexplained: Vec<_> = not_succeeded
        .iter()
        .filter(|(key, _)| out_at_kill.contains(*key) || !gave_up(key))
        .collect();
    assert!(
        unexplained.is_empty(),
        "performed, not recorded succeeded, with no word of a completion given up past its bound: \
         {unexplained:?}\n{}\n{}",
        python.stderr_tail(),
        gateway_log.stderr_tail()
    );
    let failed: Vec<&String> = held
        .iter()
        .filter(|(_, (state, _))| state == "failed")
        .map(|(key, _)| key)
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}");

    // The figures: which completions were tried again, and for how long.
    let mut python_retried: BTreeMap<String, f64> = BTreeMap::new();
    for line in &lines {
        if let Some(key) = line["completion_retry"].as_str() {
            let until = line["out"].as_f64().unwrap() + line["pause"].as_f64().unwrap();
            let longest = python_retried.entry(key.to_string()).or_default();
            *longest = longest.max(until);
        }
    }
    let mut gateway_retried: BTreeMap<String, f64> = BTreeMap::new();
    for line in &gateway_said {
        let Some(rest) = line.strip_prefix("effectwatch gateway: recorded the tool's answer for ")
        else {
            continue;
        };
        let key = rest.split(' ').next().unwrap().to_string();
        let out: f64 = rest
            .rsplit("out of reach for ")
            .next()
            .and_then(|tail| tail.trim_end_matches(" s").parse().ok())
            .unwrap_or_else(|| panic!("the gateway said {line:?}"));
        gateway_retried.insert(key, out);
    }
    let out_retried = out_at_kill
        .iter()
        .filter(|key| python_retried.contains_key(*key) || gateway_retried.contains_key(*key))
        .count();
    assert!(
        out_retried >= writers,
        "of the calls out at the kill ({out_at_kill:?}), {out_retried} had their completion tried \
         again: the leader was not killed between the answers and their completions\n{}",
        gateway_log.stderr_tail()
    );
    let longest = |retried: &BTreeMap<String, f64>| retried.values().copied().fold(0.0, f64::max);
    let left_dispatched = not_succeeded.len();
    eprintln!(
        "patroni, the leader killed with every provider call out ({KILL_PYTHON_THREADS} Python threads, \
         {GATEWAY_CALLERS} gateway callers; the provider answering in {} s): the lead moved {} -> {} in {:.1} s\n  \
         {} effects performed, {} out at the kill, all {} of them recorded succeeded on the new leader\n  \
         completions tried again: Python {} (the longest {:.1} s), gateway {} (the longest {:.1} s); \
         left dispatched past the bound: {left_dispatched}\n  \
         0 sent twice, 0 failed; cluster up in {:.1} s, run {:.1} s, test {:.1} s",
        SLOW_PROVIDER.as_secs(),
        change.from,
        change.to,
        change.took.as_secs_f64(),
        performed.len(),
        out_at_kill.len(),
        out_at_kill.len(),
        python_retried.len(),
        longest(&python_retried),
        gateway_retried.len(),
        longest(&gateway_retried),
        cluster_up.as_secs_f64(),
        run_took.as_secs_f64(),
        began.elapsed().as_secs_f64(),
    );
}

/// How long the dead reconciler's leases run: past the failover (`ttl`,
/// 20 s, and the promotion), so that they are still held on the new leader.
const RECONCILER_LEASE: Duration = Duration::from_secs(30);
const ORPHANS: usize = 6;

/// A reconciler leases unknown effects on the leader (lease_for_reconcile,
/// as each pass of `effectwatch reconcile` does), then the leader's node
/// dies, the reconciler with it. On the new leader the leases, written
/// synchronously, are still there, held by the dead one: another reconciler
/// polling the cluster's URL takes none of them before their term ends
/// (by the ledger's clock) and every one of them within a pass of it; past
/// the term, nothing is held by the dead one.
#[tokio::test]
async fn a_dead_nodes_reconciler_leases_hold_their_term_on_the_new_leader_and_no_longer() {
    use effectwatch::ledger::reconciler::{self as leases, LeaseTerms};
    let began = Instant::now();
    let Some((mut cluster, cluster_up)) = ledger_cluster().await else {
        return;
    };
    let mut settings = ConnectSettings::new(cluster.url("ledger"));
    settings.connect_timeout = Duration::from_secs(2);
    let pool = ledger::connect(&settings).await.unwrap();
    for n in 0..ORPHANS {
        let key = format!("refund:ORPHAN{n}:v1");
        let intent = common::intent(&key, &format!("invoice:{key}"));
        let started = begin_and_dispatch(&pool, &intent, "agent", false, None)
            .await
            .unwrap()
            .expect("begun");
        assert!(started.dispatched, "{key} claimed");
        complete_effect(&pool, &key, Outcome::Unknown, &Completion::default())
            .await
            .unwrap();
    }
    let terms = LeaseTerms {
        lease: RECONCILER_LEASE,
        grace: Duration::ZERO,
        batch: 100,
    };
    let leader = cluster.leader().await.expect("a leader");
    let dead_name = format!("reconciler@{leader}");
    let taken = leases::lease(&pool, &dead_name, terms, None).await.unwrap();
    assert_eq!(
        taken.len(),
        ORPHANS,
        "the reconciler on {leader} leased them"
    );
    let (term_end,): (chrono::DateTime<chrono::Utc>,) = sqlx::query_as(
        "select max(claimed_until) from ledger.reconcile_leases where claimed_by = $1",
    )
    .bind(&dead_name)
    .fetch_one(&pool.session_pool())
    .await
    .unwrap();

    let change = cluster.kill_leader().await;
    // Another reconciler on the cluster's URL, a pass every POLL.
    const POLL: Duration = Duration::from_millis(200);
    let successor = format!("reconciler@{}", change.to);
    let mut early = Vec::new();
    let mut passes = 0;
    let mut first_pass_at = None;
    let (taken_at, taken) = loop {
        let attempt = leases::lease(&pool, &successor, terms, None).await;
        let now = match leases::ledger_now(&pool).await {
            Ok(now) => now,
            Err(_) => {
                // The pool finding the new leader: its first calls may fail.
                assert!(
                    began.elapsed() < Duration::from_secs(180),
                    "no pass on the new leader"
                );
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        let Ok(leased) = attempt else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        first_pass_at.get_or_insert(now);
        if now < term_end {
            passes += 1;
            early.extend(leased.into_iter().map(|effect| effect.op_key));
        } else if !leased.is_empty() {
            break (now, leased);
        }
        assert!(
            now < term_end + chrono::Duration::seconds(10),
            "past the dead reconciler's term by 10 s, its leases were not taken"
        );
        tokio::time::sleep(POLL).await;
    };
    assert!(
        early.is_empty(),
        "taken on the new leader before the dead reconciler's term ended: {early:?}"
    );
    assert_eq!(
        taken.len(),
        ORPHANS,
        "the successor took every orphan in one pass"
    );
    let first_pass_at = first_pass_at.expect("a pass");
    assert!(
        first_pass_at < term_end,
        "the failover ({:.1} s) outlasted the lease: nothing shows the dead one's lease held",
        change.took.as_secs_f64()
    );
    let late = (taken_at - term_end).to_std().unwrap_or_default();
    assert!(
        late <= POLL + Duration::from_secs(1),
        "taken {late:?} after the term ended"
    );
    let held_by_dead: i64 = sqlx::query_scalar(
        "select count(*) from ledger.reconcile_leases
          where claimed_by = $1 and claimed_until > now()",
    )
    .bind(&dead_name)
    .fetch_one(&pool.session_pool())
    .await
    .unwrap();
    assert_eq!(held_by_dead, 0, "leases still held by the dead reconciler");
    eprintln!(
        "patroni, a dead node's reconciler leases ({ORPHANS} unknown effects, a {} s lease): \
         the lead moved {} -> {} in {:.1} s\n  \
         on the new leader, {:.1} s of the dead one's term left at the successor's first pass; \
         {passes} passes took none before it ended, one took all {ORPHANS} {:.2} s after it; \
         none held by the dead one past its term\n  \
         cluster up in {:.1} s, test {:.1} s",
        RECONCILER_LEASE.as_secs(),
        change.from,
        change.to,
        change.took.as_secs_f64(),
        (term_end - first_pass_at)
            .to_std()
            .unwrap_or_default()
            .as_secs_f64(),
        late.as_secs_f64(),
        cluster_up.as_secs_f64(),
        began.elapsed().as_secs_f64(),
    );
}

/// An effect an agent began, dispatched and never heard back about, written
/// through `pool`, each call made again until a leader takes it; performed
/// at `provider` too (the agent's call landed) when one is given.
async fn unknown_effect(pool: &LedgerPool, key: &str, provider: Option<&FakeProvider>) {
    use effectwatch::fakeprovider::NewEffect;
    use effectwatch::ledger::State;
    let target = format!("invoice:{key}");
    let mut intent = common::intent(key, &target);
    intent.provider = Some("pay".to_string());
    let started = Instant::now();
    let again = |what: &str, error: &dyn std::fmt::Display| {
        assert!(
            started.elapsed() < KEY_TIMEOUT,
            "{key}: {what} found no leader for {KEY_TIMEOUT:?}; last error: {error}"
        );
    };
    loop {
        match begin_and_dispatch(pool, &intent, "agent", false, None).await {
            // Claimed now, or by a try whose answer was lost.
            Ok(Some(begun)) if begun.dispatched || begun.begun.decision == Decision::InFlight => {
                break;
            }
            Ok(other) => panic!("{key}: not claimed: {:?}", other.map(|s| s.begun.decision)),
            Err(error) => again("begin_and_dispatch", &error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(provider) = provider {
        provider.insert_effect(NewEffect {
            kind: "refund".into(),
            amount_minor: Some(1200),
            currency: Some("EUR".into()),
            target: Some(target.clone()),
            idempotency_key: Some(key.into()),
            metadata: json!({ "op_key": key }),
            reverses: None,
        });
    }
    loop {
        let completion = Completion {
            reason: Some("the provider's answer never came".into()),
            ..Completion::default()
        };
        match complete_effect(pool, key, Outcome::Unknown, &completion).await {
            Ok(_) => return,
            Err(error) => {
                // Written by a try whose answer was lost?
                let found = effectwatch::ledger::history::find_effect(pool, key).await;
                if let Ok(Some(effect)) = found
                    && effect.state == State::Unknown
                {
                    return;
                }
                again("complete_effect", &error);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[path = "patroni/console.rs"]
mod console;

/// Whether the Unknown pane on `screen` lists `key`.
fn lists(screen: &str, key: &str) -> bool {
    screen.contains("Unknown outcomes") && screen.contains(key)
}

/// The replay lag a console's header says, in seconds: `replica, 0.4 s
/// behind`, or `replica 3.1 s behind: stale`.
fn lag_said(header: &str) -> Option<f64> {
    let (_, after) = header.split_once("replica")?;
    after
        .trim_start_matches(',')
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Two consoles run as a person runs them beside a Patroni cluster,
/// `--database-url` the cluster's URL (every node, the primary wanted) and
/// `--read-url` one of its replicas, while two agents write on the primary
/// and the lead is switched over:
/// - one reads the asynchronous replica, which stays a replica. Its config
///   calls the data stale past 1 s of replay lag (`replica_lag_stale_secs`:
///   with the default 30 s a switchover's few seconds show only as the lag
///   in muted words). Before: it says it reads a replica and is current.
///   During: the replica has no primary to stream from, and the header says
///   so as stale data. After: current again, the same process, and an
///   effect written after the switch on its screen.
/// - one reads the synchronous standby, which the switchover promotes: it
///   says it reads a replica before; after, the node it reads is the
///   primary and the header no longer calls it a replica; an effect written
///   after the switch is on its screen, the same process.
/// What each header said through the switch is printed with the figures.
#[tokio::test]
async fn consoles_on_replicas_say_so_show_the_switchover_and_read_on_without_a_restart() {
    let began = Instant::now();
    let Some((cluster, cluster_up)) = ledger_cluster().await else {
        return;
    };
    let (_, standby, others) = cluster.roles().await;
    let replica = others.first().expect("an asynchronous replica").clone();
    let url = cluster.url("ledger");
    let mut settings = ConnectSettings::new(url.clone());
    settings.connect_timeout = Duration::from_secs(2);
    let pool = ledger::connect(&settings).await.unwrap();
    unknown_effect(&pool, "refund:BEFORE-SWITCH:v1", None).await;

    let (_fake, provider) = FakeProvider::start().await.unwrap();
    let record = Arc::new(Record::default());
    let stop = Arc::new(AtomicBool::new(false));
    let agents: Vec<_> = (0..2)
        .map(|index| {
            tokio::spawn(agent(
                index,
                url.clone(),
                provider.clone(),
                record.clone(),
                stop.clone(),
            ))
        })
        .collect();

    let mut on_replica = console::Console::start(
        &url,
        &cluster.node_url(&replica, "ledger"),
        "replica_lag_stale_secs = 1\n",
    );
    let mut on_standby = console::Console::start(&url, &cluster.node_url(&standby, "ledger"), "");
    let mut before = Vec::new();
    for (name, console) in [("replica", &mut on_replica), ("standby", &mut on_standby)] {
        // The first poll waits for the binary's start beside the agents.
        console
            .wait_for(
                &format!("the console on the {name}, live"),
                Duration::from_secs(60),
                |screen| screen.lines().next().is_some_and(|h| h.contains("● live")),
            )
            .await;
        console.press("2");
        console
            .wait_for(
                &format!("the console on the {name} saying it reads a replica"),
                Duration::from_secs(20),
                |screen| {
                    let header = screen.lines().next().unwrap_or_default();
                    header.contains("● live")
                        && header.contains("replica, ")
                        && lists(screen, "refund:BEFORE-SWITCH:v1")
                },
            )
            .await;
        before.push(console.header());
    }
    completions(&record, 10).await;

    let switch_at = Instant::now();
    let change = cluster.switchover().await;
    assert_eq!(change.to, standby);
    let writable_after = cluster.wait_until_writable(&change.to, switch_at).await;
    unknown_effect(&pool, "refund:AFTER-SWITCH:v1", None).await;
    let written_at = Instant::now();
    on_replica
        .wait_for(
            "the console on the replica, current again, showing the effect written after the switch",
            Duration::from_secs(30),
            |screen| {
                let header = screen.lines().next().unwrap_or_default();
                header.contains("● live")
                    && header.contains("replica, ")
                    && lists(screen, "refund:AFTER-SWITCH:v1")
            },
        )
        .await;
    let replica_shows = written_at.elapsed();
    on_standby
        .wait_for(
            "the console on the promoted standby showing the effect written after the switch",
            Duration::from_secs(30),
            |screen| lists(screen, "refund:AFTER-SWITCH:v1"),
        )
        .await;
    let standby_shows = written_at.elapsed();
    // Promoted, it is told of changes again: the poller listens to it.
    on_standby
        .wait_for(
            "the console on the promoted standby listening to it",
            Duration::from_secs(20),
            |screen| {
                let header = screen.lines().next().unwrap_or_default();
                header.contains("● live") && !header.contains("not listening")
            },
        )
        .await;
    // A poll or two more: what the header settles on.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for agent in agents {
        agent.await.unwrap();
    }

    let replica_headers = on_replica.headers_since(switch_at);
    let standby_headers = on_standby.headers_since(switch_at);
    let stale: Vec<&String> = replica_headers
        .iter()
        .filter(|header| header.contains("behind: stale"))
        .collect();
    assert!(
        !stale.is_empty(),
        "the console on the replica never called its data stale through the switchover: \
         {replica_headers:#?}"
    );
    // The replica, cut off from its primary through the switch, says so
    // whatever its stale mark.
    assert!(
        replica_headers
            .iter()
            .any(|header| header.contains("primary out of reach")),
        "the console on the replica never said its primary was out of reach: {replica_headers:#?}"
    );
    let most_behind = |headers: &[String]| {
        headers
            .iter()
            .filter_map(|header| lag_said(header))
            .fold(0.0, f64::max)
    };
    let after_replica = on_replica.header();
    let after_standby = on_standby.header();
    assert!(
        after_replica.contains("replica, ") && after_replica.contains("● live"),
        "{after_replica}"
    );
    assert!(
        !after_standby.contains("replica"),
        "the promoted node is the primary now, the console still calls it a replica: {after_standby}"
    );
    assert!(
        on_replica.running() && on_standby.running(),
        "a console ended"
    );
    // The header's words, without the time of the poll.
    let words = |header: &str| {
        header
            .split('│')
            .filter(|part| !part.contains("polled") && !part.contains("effectwatch"))
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" │ ")
    };
    let distinct = |headers: &[String]| {
        let mut seen: Vec<String> = Vec::new();
        for header in headers {
            let said = words(header)
                .split_whitespace()
                .map(|word| {
                    if word.parse::<f64>().is_ok() {
                        "N"
                    } else {
                        word
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
            if seen.last() != Some(&said) {
                seen.push(said);
            }
        }
        seen
    };
    eprintln!(
        "patroni, consoles on replicas: the lead moved {} -> {} in {:.1} s, writable after {:.1} s\n  \
         on the replica {replica} (stale past 1 s): before \"{}\"; through the switch {:?}, \
         the most behind {:.1} s; {} header(s) said stale; the effect written after the switch on \
         screen {:.1} s after it was written, \"{}\"\n  \
         on the standby {standby}, promoted (the default 30 s): before \"{}\"; through the switch {:?}, \
         the most behind {:.1} s; the effect written after the switch on screen {:.1} s after it \
         was written, \"{}\"\n  \
         neither console restarted; cluster up in {:.1} s, test {:.1} s",
        change.from,
        change.to,
        change.took.as_secs_f64(),
        writable_after.as_secs_f64(),
        words(&before[0]),
        distinct(&replica_headers),
        most_behind(&replica_headers),
        stale.len(),
        replica_shows.as_secs_f64(),
        words(&after_replica),
        words(&before[1]),
        distinct(&standby_headers),
        most_behind(&standby_headers),
        standby_shows.as_secs_f64(),
        words(&after_standby),
        cluster_up.as_secs_f64(),
        began.elapsed().as_secs_f64(),
    );
}

/// The reconciler service's settings: a pass every 200 ms, leases of
/// `SERVICE_LEASE`, four effects leased at a time and asked about at once.
const SERVICE_LEASE: Duration = Duration::from_secs(10);
const SERVICE_BATCH: usize = 4;
/// How long the provider takes to answer a lookup: a batch is out at the
/// provider whenever the switchover comes.
const SLOW_LOOKUP: Duration = Duration::from_millis(700);
const UNKNOWN_BEFORE: usize = 24;
const UNKNOWN_AFTER: usize = 12;
const SERVICE_NAME: &str = "reconciler@patroni";

/// A real `effectwatch reconcile --watch` process, its `--database-url` the
/// cluster's URL, with unknown effects to settle (each performed at the
/// fake provider: its agent's call landed, the answer was lost), through a
/// `patronictl switchover` while a batch of its lookups is out (the
/// provider answering in 0.7 s). The same process, never restarted, goes
/// on settling on the new leader: what was left, and effects written after
/// the switch. Then, on the new leader: every effect `succeeded`, each
/// reconciled once, nothing sent to the provider; the leases the cut pass
/// held, written synchronously, were held on the new leader until their
/// term ended (by the ledger's clock) and were taken again just after it,
/// never before; no lease is held once it is done.
#[tokio::test]
async fn a_reconciler_service_settles_on_through_a_switchover_and_holds_no_lease_past_its_term() {
    use effectwatch::fakeprovider::{Fault, Route};
    let began = Instant::now();
    let Some((cluster, cluster_up)) = ledger_cluster().await else {
        return;
    };
    let url = cluster.url("ledger");
    let (fake, _provider) = FakeProvider::start().await.unwrap();
    fake.set_fault(Route::Lookup, Some(Fault::Slow(SLOW_LOOKUP)));
    let mut settings = ConnectSettings::new(url.clone());
    settings.connect_timeout = Duration::from_secs(2);
    let pool = ledger::connect(&settings).await.unwrap();
    for n in 0..UNKNOWN_BEFORE {
        unknown_effect(&pool, &format!("refund:LOST-{n}:v1"), Some(&fake)).await;
    }

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[reconciler]\ninterval_secs = 0.2\ngrace_secs = 0\nlease_secs = {}\nbatch = {SERVICE_BATCH}\n\
             concurrency = {SERVICE_BATCH}\n",
            fake.provider_toml("pay", 5_000),
            SERVICE_LEASE.as_secs()
        ),
    )
    .unwrap();
    let mut service = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
        .arg("--config")
        .arg(&config)
        .args([
            "--database-url",
            &url,
            "reconcile",
            "--watch",
            "--as",
            SERVICE_NAME,
        ])
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting effectwatch reconcile");
    let said: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let reading = {
        let said = said.clone();
        let mut stderr = BufReader::new(service.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                said.lock().unwrap().push((Instant::now(), line));
            }
        })
    };
    let said_tail = |said: &Mutex<Vec<(Instant, String)>>| {
        let said = said.lock().unwrap();
        said[said.len().saturating_sub(20)..]
            .iter()
            .map(|(_, line)| line.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let reconciled = || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "select count(*) from ledger.reconciliations where requested_by = $1",
            )
            .bind(SERVICE_NAME)
            .fetch_one(&pool.session_pool())
            .await
        }
    };
    let waiting = Instant::now();
    loop {
        if reconciled().await.unwrap() >= 6 {
            break;
        }
        assert!(
            waiting.elapsed() < KEY_TIMEOUT,
            "the reconciler settled nothing:\n{}",
            said_tail(&said)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The switchover, while a batch is out at the provider.
    let settled_before = reconciled().await.unwrap() as usize;
    let switch_at = Instant::now();
    let change = cluster.switchover().await;
    let writable_after = cluster.wait_until_writable(&change.to, switch_at).await;
    // What the cut pass left leased, still held: taken on the old leader,
    // whose last transaction the promoted node replayed last; a lease taken
    // on the new leader ends later than that and a term.
    let mut on_new_leader = PgConnection::connect(&cluster.node_url(&change.to, "ledger"))
        .await
        .unwrap();
    let held_at_switch: Vec<(String, String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "select e.op_key, e.state::text, l.claimed_until
           from ledger.reconcile_leases l join ledger.effects e on e.id = l.effect_id
          where l.claimed_by = $1 and l.claimed_until > now()
            and l.claimed_until <= pg_last_xact_replay_timestamp() + $2::interval",
    )
    .bind(SERVICE_NAME)
    .bind(format!("{} seconds", SERVICE_LEASE.as_secs()))
    .fetch_all(&mut on_new_leader)
    .await
    .unwrap();
    for n in 0..UNKNOWN_AFTER {
        unknown_effect(&pool, &format!("refund:LOST-AFTER-{n}:v1"), Some(&fake)).await;
    }
    let all = UNKNOWN_BEFORE + UNKNOWN_AFTER;
    let waiting = Instant::now();
    loop {
        let settled: i64 = sqlx::query_scalar(
            "select count(*) from ledger.effects where op_key like 'refund:LOST-%' and state <> 'unknown'",
        )
        .fetch_one(&mut on_new_leader)
        .await
        .unwrap();
        if settled as usize == all {
            break;
        }
        assert!(
            waiting.elapsed() < SERVICE_LEASE + KEY_TIMEOUT,
            "{settled} of {all} settled on the new leader:\n{}",
            said_tail(&said)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled_took = switch_at.elapsed();
    let pid = nix::unistd::Pid::from_raw(service.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), service.wait())
        .await
        .expect("the reconciler did not stop within 20 s of SIGTERM")
        .unwrap();
    reading.await.unwrap();
    assert!(status.success(), "{status:?}\n{}", said_tail(&said));

    let states: Vec<(String, String)> = sqlx::query_as(
        "select op_key, state::text from ledger.effects where op_key like 'refund:LOST-%'",
    )
    .fetch_all(&mut on_new_leader)
    .await
    .unwrap();
    let not_succeeded: Vec<&(String, String)> = states
        .iter()
        .filter(|(_, state)| state != "succeeded")
        .collect();
    assert!(
        states.len() == all && not_succeeded.is_empty(),
        "{} effects, not succeeded: {not_succeeded:?}",
        states.len()
    );
    let reconciliations: Vec<(String, i64, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "select op_key, count(*), max(at) from ledger.reconciliations
          where op_key like 'refund:LOST-%' group by op_key",
    )
    .fetch_all(&mut on_new_leader)
    .await
    .unwrap();
    let twice: Vec<&(String, i64, _)> = reconciliations.iter().filter(|(_, n, _)| *n > 1).collect();
    assert!(twice.is_empty(), "reconciled twice: {twice:?}");
    assert_eq!(reconciliations.len(), all, "each effect reconciled once");
    assert_eq!(
        fake.requests(Route::Create),
        0,
        "the reconciler sent something to the provider"
    );
    // The cut pass's leases: held to their term on the new leader, taken
    // again within a pass or two of it, never before.
    let when_reconciled: BTreeMap<&str, chrono::DateTime<chrono::Utc>> = reconciliations
        .iter()
        .map(|(key, _, at)| (key.as_str(), *at))
        .collect();
    let mut late_by = Vec::new();
    for (key, state, term_end) in &held_at_switch {
        if state != "unknown" {
            continue;
        }
        let at = when_reconciled[key.as_str()];
        assert!(
            at >= *term_end,
            "{key}, leased before the switchover until {term_end}, was reconciled at {at}"
        );
        let late = (at - *term_end).to_std().unwrap_or_default();
        assert!(
            late < Duration::from_secs(5),
            "{key} was taken {late:?} after its lease ended"
        );
        late_by.push(late.as_secs_f64());
    }
    let still_held: i64 = sqlx::query_scalar(
        "select count(*) from ledger.reconcile_leases where claimed_until > now()",
    )
    .fetch_one(&mut on_new_leader)
    .await
    .unwrap();
    assert_eq!(still_held, 0, "leases held once everything was settled");
    let lines = said.lock().unwrap().clone();
    let failed_passes = lines
        .iter()
        .filter(|(_, line)| line.contains("reconcile pass failed"))
        .count();
    let failures: BTreeSet<String> = lines
        .iter()
        .filter_map(|(_, line)| line.split_once("reconcile pass failed: "))
        .map(|(_, why)| why.chars().take(90).collect())
        .collect();
    let lookups = fake.requests(Route::Lookup) as usize;
    let cut: Vec<&(String, String, _)> = held_at_switch
        .iter()
        .filter(|(_, state, _)| state == "unknown")
        .collect();
    eprintln!(
        "patroni, a reconciler service through a switchover ({UNKNOWN_BEFORE} unknown effects before, \
         {UNKNOWN_AFTER} after; lookups answered in {:.1} s, leases of {} s, {SERVICE_BATCH} at a time): \
         the lead moved {} -> {} in {:.1} s, writable after {:.1} s\n  \
         settled {settled_before} before the switch and {} after it by the same process \
         ({failed_passes} passes failed meanwhile: {failures:?}); all {all} settled {:.1} s after \
         the asking\n  \
         {} leases held at the switch by the cut pass ({} of their effects still unknown), taken \
         again {:?} s after their term; {lookups} lookups for {all} effects ({} asked again after \
         the cut pass), each effect reconciled once, 0 sent to the provider, 0 failed, no lease \
         held at the end\n  \
         cluster up in {:.1} s, test {:.1} s",
        SLOW_LOOKUP.as_secs_f64(),
        SERVICE_LEASE.as_secs(),
        change.from,
        change.to,
        change.took.as_secs_f64(),
        writable_after.as_secs_f64(),
        all - settled_before,
        settled_took.as_secs_f64(),
        held_at_switch.len(),
        cut.len(),
        late_by
            .iter()
            .map(|late| format!("{late:.2}"))
            .collect::<Vec<_>>(),
        lookups.saturating_sub(all),
        cluster_up.as_secs_f64(),
        began.elapsed().as_secs_f64(),
    );
}

/// How long the CLI is run, one settle command after another, through a
/// switchover.
const CLI_RUNS_FOR: Duration = Duration::from_secs(14);

/// The CLI as an operator runs it, on the cluster's URL, through a
/// `patronictl switchover`: `effectwatch annotate` on an effect, over and
/// over, one process each. Every run that said it was done (exit 0) is in
/// the new leader's audit trail, once; a run that could not be done says
/// so in one line with the out-of-reach exit code (4), never another code
/// or a panic; and the CLI writes again once a leader takes writes.
#[tokio::test]
async fn the_cli_settles_through_a_switchover_and_every_write_it_acknowledged_is_kept() {
    let began = Instant::now();
    let Some((cluster, cluster_up)) = ledger_cluster().await else {
        return;
    };
    let url = cluster.url("ledger");
    let mut settings = ConnectSettings::new(url.clone());
    settings.connect_timeout = Duration::from_secs(2);
    let pool = ledger::connect(&settings).await.unwrap();
    let key = "refund:CLI-NOTES:v1";
    unknown_effect(&pool, key, None).await;

    let runs = tokio::spawn({
        let url = url.clone();
        async move {
            let mut runs: Vec<(usize, Option<i32>, String, Duration)> = Vec::new();
            let start = Instant::now();
            let mut index = 0;
            while start.elapsed() < CLI_RUNS_FOR {
                let at = start.elapsed();
                let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_effectwatch"))
                    .args(["--database-url", &url, "--operator", "carol"])
                    .args(["annotate", key, "--reason", &format!("cli-note-{index}")])
                    .env("NO_COLOR", "1")
                    .stdin(Stdio::null())
                    .output()
                    .await
                    .unwrap();
                let said = String::from_utf8_lossy(&output.stderr).trim().to_string();
                runs.push((index, output.status.code(), said, at));
                index += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            runs
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let switch_at = Instant::now();
    let change = cluster.switchover().await;
    let writable_after = cluster.wait_until_writable(&change.to, switch_at).await;
    let runs = runs.await.unwrap();

    let kept: Vec<String> = sqlx::query_scalar(
        "select reason from ledger.audit_log where action = 'annotate' order by seq",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let acknowledged: Vec<String> = runs
        .iter()
        .filter(|(_, code, _, _)| *code == Some(0))
        .map(|(index, _, _, _)| format!("cli-note-{index}"))
        .collect();
    let refused: Vec<&(usize, Option<i32>, String, Duration)> = runs
        .iter()
        .filter(|(_, code, _, _)| *code != Some(0))
        .collect();
    for (index, code, said, _) in &refused {
        assert_eq!(
            *code,
            Some(4),
            "run {index} ended neither done nor out of reach: {code:?} {said}"
        );
        assert!(
            !said.is_empty() && said.lines().count() == 1 && !said.contains("panicked"),
            "run {index} did not say why in one line: {said:?}"
        );
    }
    for note in &acknowledged {
        assert_eq!(
            kept.iter().filter(|kept| *kept == note).count(),
            1,
            "{note} was acknowledged but is not in the new leader's audit trail once: {kept:?}"
        );
    }
    let switched = switch_at.duration_since(began);
    let last_refused = refused.iter().map(|(_, _, _, at)| *at).max();
    let after_switch = runs
        .iter()
        .filter(|(_, code, _, at)| *code == Some(0) && Some(*at) > last_refused)
        .count();
    assert!(
        after_switch > 0,
        "the CLI never wrote again after the switch: {runs:?}"
    );
    let others = kept.len() - acknowledged.len();
    eprintln!(
        "patroni, the CLI through a switchover: the lead moved {} -> {} in {:.1} s, writable after {:.1} s; \
         {} runs: {} acknowledged, all kept (0 lost); {} out of reach, each in one line (e.g. \"{}\"); \
         {} of those written all the same; {} done after the last refusal; cluster up in {:.1} s, \
         switch at {:.1} s, test {:.1} s",
        change.from,
        change.to,
        change.took.as_secs_f64(),
        writable_after.as_secs_f64(),
        runs.len(),
        acknowledged.len(),
        refused.len(),
        refused
            .first()
            .map(|(_, _, said, _)| said.as_str())
            .unwrap_or(""),
        others,
        after_switch,
        cluster_up.as_secs_f64(),
        switched.as_secs_f64(),
        began.elapsed().as_secs_f64(),
    );
}
