//! A Patroni cluster of the test's own: one etcd and PostgreSQL nodes under
//! Patroni, every port on 127.0.0.1, `synchronous_mode` on — the ledger as
//! its users run PostgreSQL when they want it to fail over.
//!
//! Why it is built this way:
//! - etcd is the distribution's (`etcd-server`); Patroni is PyPI's, in a
//!   virtual environment under `target/` (in the temporary folder where the
//!   server's user cannot reach `target/`) that is built once and kept: a
//!   marker file names what it holds, and a file lock keeps test binaries
//!   running at once from building it over each other. Where etcd, the
//!   server binaries or python3's venv are missing, the caller is told so
//!   and says it is skipped — unless EFFECTWATCH_REQUIRE_PATRONI=1, where
//!   that is a failure.
//! - Each node's settings are docs/patroni/node.yml.template filled in, as
//!   docs/patroni/cluster.sh fills it: the cluster a reader starts by hand
//!   is the one tested.
//! - PostgreSQL refuses to run as root, and Patroni runs it: as root,
//!   Patroni runs as the `postgres` user (as the test servers of
//!   src/localpg.rs do), from an interpreter that user can reach.
//! - Nothing outlives the test. A watchdog started before anything else
//!   waits on a pipe only this process holds; when the cluster is dropped,
//!   or the process dies however it dies, it kills Patroni's and etcd's
//!   process groups, then each PostgreSQL (Patroni starts it in a session of
//!   its own, so that a restart of Patroni leaves it running: the watchdog
//!   finds it by its pid file), and removes the folder.

use std::fs::{self, File};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What the virtual environment holds: Patroni with its etcd v3 module
/// (etcd 3.4 serves only the v3 API unless told otherwise) and psycopg 3.
const REQUIREMENT: &str = "patroni[etcd3,psycopg3]==4.1.5";
const TEMPLATE: &str = include_str!("../../docs/patroni/node.yml.template");
const SCOPE: &str = "effectwatch";
/// Starting etcd, the leader's initdb and a base backup for each replica.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// A switchover, or a failover once the dead leader's key has expired
/// (`ttl`: 20 s).
const SWITCH_TIMEOUT: Duration = Duration::from_secs(60);
/// Stopping everything when the cluster is dropped.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// One PostgreSQL server under Patroni.
pub struct Node {
    pub name: String,
    pub pg_port: u16,
    pub rest_port: u16,
    dir: PathBuf,
}

/// A member of the cluster as Patroni's REST API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// `leader`, `sync_standby`, `replica`.
    pub role: String,
    /// `running`, `streaming`, `stopped`, `starting`, …
    pub state: String,
    /// A replica's bytes of WAL behind the leader's last reported position:
    /// received, and replayed (None for the leader).
    pub receive_lag: Option<u64>,
    pub replay_lag: Option<u64>,
}

/// The leader moved: from which node to which, and how long it took from
/// the switchover asked (or the leader killed) to the new leader running.
#[derive(Debug, Clone)]
pub struct LeaderChange {
    pub from: String,
    pub to: String,
    pub took: Duration,
}

pub struct PatroniCluster {
    dir: PathBuf,
    venv: PathBuf,
    nodes: Vec<Node>,
    /// etcd and each node's Patroni, reaped once the watchdog has stopped them.
    children: Vec<(String, Child)>,
    /// Nodes killed by the test: not waited for until restarted.
    killed: Vec<String>,
    run_as: Option<ServerUser>,
    watchdog: Child,
    watchdog_pipe: Option<ChildStdin>,
    http: reqwest::Client,
}

impl PatroniCluster {
    /// etcd and `nodes` PostgreSQL servers under Patroni, returned once one
    /// leads and another streams to it as its synchronous standby. None,
    /// said on stderr, where what it needs is not installed.
    pub async fn start(nodes: usize) -> Option<PatroniCluster> {
        assert!(nodes >= 2, "a cluster that can switch over has two nodes");
        let Some(etcd) = find_program("etcd", &["/usr/bin", "/usr/sbin"]) else {
            return skipped("etcd is not installed (Debian's etcd-server package)");
        };
        let Some(bin_dir) = server_binaries() else {
            return skipped("the PostgreSQL server binaries are not installed");
        };
        let run_as = ServerUser::when_root();
        let venv = match patroni_venv(run_as.as_ref()) {
            Ok(venv) => venv,
            Err(why) => return skipped(&why),
        };

        let dir = cluster_dir();
        if let Some(user) = &run_as {
            user.hand_over(&dir);
        }
        let (watchdog, watchdog_pipe) = start_watchdog(&dir);
        let mut ports = free_ports(2 + 2 * nodes).into_iter();
        let mut port = || ports.next().expect("enough free ports");
        let (etcd_port, peer_port) = (port(), port());
        let nodes: Vec<Node> = (1..=nodes)
            .map(|i| Node {
                name: format!("n{i}"),
                pg_port: port(),
                rest_port: port(),
                dir: dir.join(format!("n{i}")),
            })
            .collect();
        let mut cluster = PatroniCluster {
            dir,
            venv,
            nodes,
            children: Vec::new(),
            killed: Vec::new(),
            run_as,
            watchdog,
            watchdog_pipe: Some(watchdog_pipe),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()
                .expect("an HTTP client"),
        };

        let peer = format!("http://127.0.0.1:{peer_port}");
        let client = format!("http://127.0.0.1:{etcd_port}");
        let mut command = Command::new(etcd);
        command
            .current_dir(&cluster.dir)
            .args(["--name", "etcd", "--data-dir"])
            .arg(cluster.dir.join("etcd"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("etcd={peer}")]);
        cluster.spawn("etcd", command, &cluster.dir.join("etcd.log"));

        for node in &cluster.nodes {
            fs::create_dir_all(&node.dir).expect("creating a node's folder");
            let config = TEMPLATE
                .replace("@SCOPE@", SCOPE)
                .replace("@NAME@", &node.name)
                .replace("@REST_PORT@", &node.rest_port.to_string())
                .replace("@PG_PORT@", &node.pg_port.to_string())
                .replace("@ETCD_HOSTS@", &format!("127.0.0.1:{etcd_port}"))
                .replace("@NODE_DIR@", &node.dir.to_string_lossy())
                .replace("@BIN_DIR@", &bin_dir.to_string_lossy());
            fs::write(node.dir.join("patroni.yml"), config).expect("writing a node's settings");
            if let Some(user) = &cluster.run_as {
                user.hand_over(&node.dir);
                user.hand_over(&node.dir.join("patroni.yml"));
            }
        }
        let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        for name in names {
            cluster.start_patroni(&name);
        }
        cluster.wait_until_healthy(START_TIMEOUT, "its start").await;
        Some(cluster)
    }

    /// The URL the ledger's writers use: every node, the primary wanted
    /// (`target_session_attrs=read-write`), so the pool follows the leader.
    pub fn url(&self, database: &str) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.pg_port))
            .collect();
        format!(
            "postgres://postgres@{}/{database}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// A URL to one node's server.
    pub fn node_url(&self, name: &str, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}",
            self.node(name).pg_port
        )
    }

    /// `127.0.0.1:PORT/DATABASE` of a node: how a ledger pool names the
    /// server it uses.
    pub fn server_name(&self, name: &str, database: &str) -> String {
        format!("127.0.0.1:{}/{database}", self.node(name).pg_port)
    }

    /// The members as the first node that answers reports them.
    /// A killed node is left out: its keys stay in etcd, saying what it
    /// last said, until they expire.
    pub async fn members(&self) -> Vec<Member> {
        for node in self.nodes.iter().filter(|n| !self.killed.contains(&n.name)) {
            let url = format!("http://127.0.0.1:{}/cluster", node.rest_port);
            let Ok(response) = self.http.get(&url).send().await else {
                continue;
            };
            let Ok(body) = response.json::<Value>().await else {
                continue;
            };
            let field =
                |member: &Value, name: &str| member[name].as_str().unwrap_or_default().to_string();
            return body["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|member| Member {
                    name: field(member, "name"),
                    role: field(member, "role"),
                    state: field(member, "state"),
                    receive_lag: member["receive_lag"].as_u64(),
                    replay_lag: member["replay_lag"].as_u64(),
                })
                .filter(|member| !self.killed.contains(&member.name))
                .collect();
        }
        Vec::new()
    }

    /// The running leader's name, if there is one now.
    pub async fn leader(&self) -> Option<String> {
        self.members()
            .await
            .into_iter()
            .find(|member| member.role == "leader" && member.state == "running")
            .map(|member| member.name)
    }

    /// `patronictl switchover` from the leader to its synchronous standby
    /// (the only node synchronous mode lets take over without losing what
    /// was acknowledged); returns once the standby leads.
    pub async fn switchover(&self) -> LeaderChange {
        let (_, to) = self.leader_and_synchronous_standby().await;
        self.switchover_to(&to).await.unwrap_or_else(|said| {
            panic!(
                "patronictl switchover to {to} failed: {said}\n{}",
                self.logs()
            )
        })
    }

    /// `patronictl switchover --leader <the leader> --candidate <candidate>
    /// --force`; returns once the candidate leads (Patroni calls it the
    /// running leader: it may still be replaying, see `wait_until_writable`),
    /// or what patronictl said when it refused (it exits 0 all the same).
    pub async fn switchover_to(&self, candidate: &str) -> Result<LeaderChange, String> {
        let (from, _) = self.leader_and_synchronous_standby().await;
        let started = Instant::now();
        let said = self
            .patronictl(&[
                "switchover",
                "--leader",
                &from,
                "--candidate",
                candidate,
                "--force",
            ])
            .await;
        if !said.contains("Successfully switched over") {
            return Err(said);
        }
        let took = self
            .wait_for_leader(candidate, started, "the switchover")
            .await;
        Ok(LeaderChange {
            from,
            to: candidate.to_string(),
            took,
        })
    }

    /// `patronictl failover --candidate <the synchronous standby> --force`:
    /// the lead forced onto a named node (no leader named, as a switchover
    /// names one), the only one synchronous mode lets take over without
    /// losing what was acknowledged; returns once it leads.
    pub async fn failover(&self) -> LeaderChange {
        let (_, to) = self.leader_and_synchronous_standby().await;
        self.failover_to(&to).await.unwrap_or_else(|said| {
            panic!(
                "patronictl failover to {to} failed: {said}\n{}",
                self.logs()
            )
        })
    }

    /// `patronictl failover --candidate <candidate> --force`; returns once
    /// the candidate leads, or what patronictl said when it refused (it
    /// exits 0 all the same). Synchronous mode lets a failover, unlike a
    /// switchover, name a node that is not the synchronous standby.
    pub async fn failover_to(&self, candidate: &str) -> Result<LeaderChange, String> {
        let (from, _) = self.leader_and_synchronous_standby().await;
        let started = Instant::now();
        let said = self
            .patronictl(&["failover", "--candidate", candidate, "--force"])
            .await;
        if !said.contains("Successfully failed over") {
            return Err(said);
        }
        let took = self
            .wait_for_leader(candidate, started, "the failover")
            .await;
        Ok(LeaderChange {
            from,
            to: candidate.to_string(),
            took,
        })
    }

    /// What `patronictl <args>` printed, stdout then stderr.
    async fn patronictl(&self, args: &[&str]) -> String {
        let output = tokio::process::Command::new(self.venv.join("bin/patronictl"))
            .arg("-c")
            .arg(self.nodes[0].dir.join("patroni.yml"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .expect("running patronictl");
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }

    /// The leader, its synchronous standby, and the other replicas.
    pub async fn roles(&self) -> (String, String, Vec<String>) {
        let (leader, standby) = self.leader_and_synchronous_standby().await;
        let others = self
            .members()
            .await
            .into_iter()
            .filter(|member| member.name != leader && member.name != standby)
            .map(|member| member.name)
            .collect();
        (leader, standby, others)
    }

    /// Waits until `name`'s PostgreSQL takes writes, and returns how long
    /// since `started`: Patroni calls a promoted node the running leader
    /// while its promotion may still be replaying what it had received.
    pub async fn wait_until_writable(&self, name: &str, started: Instant) -> Duration {
        use sqlx::Connection;
        let url = self.node_url(name, "postgres");
        loop {
            if let Ok(mut connection) = sqlx::PgConnection::connect(&url).await {
                let recovering: Result<bool, _> = sqlx::query_scalar("select pg_is_in_recovery()")
                    .fetch_one(&mut connection)
                    .await;
                if let Ok(false) = recovering {
                    return started.elapsed();
                }
            }
            assert!(
                started.elapsed() < SWITCH_TIMEOUT,
                "{name} took no writes within {SWITCH_TIMEOUT:?}: {:?}\n{}",
                self.members().await,
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops `name`'s WAL receiver (SIGSTOP): the replica receives nothing
    /// more, as behind a stalled network, and falls behind while its
    /// Patroni still reports it streaming. `resume_receiver` wakes it.
    pub fn stall_receiver(&self, name: &str) {
        use nix::sys::signal::{Signal, kill};
        kill(self.wal_receiver(name), Signal::SIGSTOP).expect("stopping a WAL receiver");
    }

    /// Wakes a WAL receiver stopped by `stall_receiver` (SIGCONT).
    pub fn resume_receiver(&self, name: &str) {
        use nix::sys::signal::{Signal, kill};
        kill(self.wal_receiver(name), Signal::SIGCONT).expect("waking a WAL receiver");
    }

    /// The WAL receiver of `name`'s PostgreSQL: the child of its postmaster
    /// that calls itself `walreceiver`.
    fn wal_receiver(&self, name: &str) -> nix::unistd::Pid {
        let pid_file = self.node(name).dir.join("data/postmaster.pid");
        let text = fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", pid_file.display()));
        let postmaster = text.lines().next().unwrap_or_default().trim().to_string();
        let found = fs::read_dir("/proc")
            .expect("listing /proc")
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|pid| {
                let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // `pid (comm) state ppid …`: the command may hold spaces.
                let parent = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .unwrap_or_default();
                let command = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                parent == postmaster && String::from_utf8_lossy(&command).contains("walreceiver")
            });
        let pid = found.unwrap_or_else(|| panic!("{name} has no WAL receiver"));
        nix::unistd::Pid::from_raw(pid)
    }

    /// The leader's Patroni stops (SIGSTOP: hung, or its machine starved),
    /// its PostgreSQL left running as the primary: Patroni's key in etcd
    /// expires after `ttl` and the synchronous standby must lead, while the
    /// old primary still answers whoever is connected to it. Returns once
    /// the standby leads; `resume` wakes the stopped Patroni.
    pub async fn stop_leaders_patroni(&mut self) -> LeaderChange {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        let (from, to) = self.leader_and_synchronous_standby().await;
        let text = fs::read_to_string(self.node(&from).dir.join("patroni.pid"))
            .unwrap_or_else(|e| panic!("reading {from}'s patroni.pid: {e}"));
        let patroni = Pid::from_raw(text.trim().parse().expect("a pid"));
        let started = Instant::now();
        killpg(patroni, Signal::SIGSTOP).expect("stopping the leader's Patroni");
        // Its REST API answers nothing now: asked no more until it resumes.
        self.killed.push(from.clone());
        let took = self
            .wait_for_leader(&to, started, "the leader's Patroni stopped")
            .await;
        LeaderChange { from, to, took }
    }

    /// Wakes a Patroni stopped by `stop_leaders_patroni` (SIGCONT): it finds
    /// its key gone and another leading, and must demote its PostgreSQL.
    pub fn resume(&mut self, name: &str) {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        let text = fs::read_to_string(self.node(name).dir.join("patroni.pid"))
            .unwrap_or_else(|e| panic!("reading {name}'s patroni.pid: {e}"));
        let patroni = Pid::from_raw(text.trim().parse().expect("a pid"));
        killpg(patroni, Signal::SIGCONT).expect("waking the stopped Patroni");
        self.killed.retain(|n| n != name);
    }

    /// The leader's postmaster killed (SIGKILL), its Patroni alive: its
    /// backends end with it, and Patroni, finding PostgreSQL gone, starts it
    /// again (crash recovery) and keeps the lead — or, were that to take too
    /// long, another node leads. Returns once a leader takes writes on a
    /// postmaster other than the one killed.
    pub async fn kill_leaders_postmaster(&mut self) -> LeaderChange {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        use sqlx::Connection;
        let (from, _) = self.leader_and_synchronous_standby().await;
        let pid_file = self.node(&from).dir.join("data/postmaster.pid");
        let pid_of = || -> Option<i32> {
            fs::read_to_string(&pid_file)
                .ok()?
                .lines()
                .next()?
                .trim()
                .parse()
                .ok()
        };
        let killed = pid_of().unwrap_or_else(|| panic!("{from}'s postmaster.pid holds no pid"));
        let started = Instant::now();
        kill(Pid::from_raw(killed), Signal::SIGKILL).expect("killing the leader's postmaster");
        loop {
            let members = self.members().await;
            if let Some(leader) = members
                .iter()
                .find(|member| member.role == "leader" && member.state == "running")
                && (leader.name != from || pid_of().is_some_and(|pid| pid != killed))
                && let Ok(mut connection) =
                    sqlx::PgConnection::connect(&self.node_url(&leader.name, "postgres")).await
                && let Ok(false) = sqlx::query_scalar::<_, bool>("select pg_is_in_recovery()")
                    .fetch_one(&mut connection)
                    .await
            {
                return LeaderChange {
                    from,
                    to: leader.name.clone(),
                    took: started.elapsed(),
                };
            }
            assert!(
                started.elapsed() < SWITCH_TIMEOUT,
                "no leader took writes within {SWITCH_TIMEOUT:?} of the postmaster's kill: {members:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The leader's node dies: its Patroni and its PostgreSQL killed at
    /// once (SIGKILL), as a machine that loses power. Its key in etcd
    /// expires after `ttl`, and the synchronous standby — the only node
    /// synchronous mode lets take over — must lead; returns once it does.
    pub async fn kill_leader(&mut self) -> LeaderChange {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::{Pid, getpgid};
        let (from, to) = self.leader_and_synchronous_standby().await;
        let dir = self.node(&from).dir.clone();
        let pid_in = |file: &str| -> i32 {
            let text = fs::read_to_string(dir.join(file))
                .unwrap_or_else(|e| panic!("reading {from}'s {file}: {e}"));
            text.lines()
                .next()
                .and_then(|line| line.trim().parse().ok())
                .unwrap_or_else(|| panic!("{from}'s {file} holds no pid: {text}"))
        };
        // Patroni first, so that it restarts nothing; then PostgreSQL's
        // whole process group, postmaster and backends at once.
        let patroni = Pid::from_raw(pid_in("patroni.pid"));
        let postmaster = Pid::from_raw(pid_in("data/postmaster.pid"));
        let started = Instant::now();
        killpg(patroni, Signal::SIGKILL).expect("killing the leader's Patroni");
        let group = getpgid(Some(postmaster)).expect("the leader's PostgreSQL process group");
        killpg(group, Signal::SIGKILL).expect("killing the leader's PostgreSQL");
        self.killed.push(from.clone());
        let took = self
            .wait_for_leader(&to, started, "the leader's death")
            .await;
        LeaderChange { from, to, took }
    }

    /// Starts a killed node's Patroni again, on the data it had: it must
    /// come back as a replica of the new leader (rewound if it had written
    /// what the standby never received), never writable.
    pub fn restart(&mut self, name: &str) {
        assert!(
            self.killed.iter().any(|n| n == name),
            "{name} was not killed"
        );
        self.killed.retain(|n| n != name);
        // The dead one is reaped before its name is reused.
        self.children.retain_mut(|(child_name, child)| {
            if child_name == name {
                let _ = child.wait();
            }
            child_name != name
        });
        self.start_patroni(name);
    }

    async fn leader_and_synchronous_standby(&self) -> (String, String) {
        let members = self.members().await;
        let with_role = |role: &str| {
            members
                .iter()
                .find(|member| member.role == role)
                .map(|member| member.name.clone())
                .unwrap_or_else(|| panic!("no {role} to hand the lead over with: {members:?}"))
        };
        (with_role("leader"), with_role("sync_standby"))
    }

    /// Waits until `name` leads, running; returns how long since `started`.
    async fn wait_for_leader(&self, name: &str, started: Instant, after: &str) -> Duration {
        loop {
            let members = self.members().await;
            let leader = members
                .iter()
                .find(|member| member.role == "leader" && member.state == "running");
            if let Some(leader) = leader {
                assert_eq!(
                    leader.name, name,
                    "after {after}, a node other than the synchronous standby leads: {members:?}"
                );
                return started.elapsed();
            }
            assert!(
                started.elapsed() < SWITCH_TIMEOUT,
                "{name} did not lead within {SWITCH_TIMEOUT:?} of {after}: {members:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every node not killed is up, one leading and one its
    /// synchronous standby: after a switchover, the old leader rejoined;
    /// after a node's death, another standby became synchronous.
    pub async fn wait_until_healthy(&mut self, within: Duration, after: &str) {
        let started = Instant::now();
        loop {
            let killed = &self.killed;
            let exited: Vec<String> = self
                .children
                .iter_mut()
                .filter(|(name, _)| !killed.contains(name))
                .filter_map(|(name, child)| match child.try_wait() {
                    Ok(Some(status)) => Some(format!("{name} ({status})")),
                    _ => None,
                })
                .collect();
            assert!(
                exited.is_empty(),
                "{} exited during the {after}:\n{}",
                exited.join(", "),
                self.logs()
            );
            let members = self.members().await;
            let leaders = members
                .iter()
                .filter(|m| m.role == "leader" && m.state == "running")
                .count();
            let synchronous = members
                .iter()
                .filter(|m| m.role == "sync_standby" && m.state == "streaming")
                .count();
            let streaming = members.iter().filter(|m| m.state == "streaming").count();
            let live = self.nodes.len() - self.killed.len();
            if members.len() == live && leaders == 1 && synchronous >= 1 && streaming == live - 1 {
                return;
            }
            assert!(
                started.elapsed() < within,
                "the Patroni cluster was not healthy within {within:?} of {after} \
                 (one leader, a synchronous standby, every other node streaming): {members:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What `name`'s Patroni has logged so far.
    pub fn patroni_log(&self, name: &str) -> String {
        fs::read_to_string(self.node(name).dir.join("patroni.log")).unwrap_or_default()
    }

    /// The end of each process's log, for a failure's message.
    pub fn logs(&self) -> String {
        let mut logs = vec![("etcd".to_string(), self.dir.join("etcd.log"))];
        for node in &self.nodes {
            logs.push((node.name.clone(), node.dir.join("patroni.log")));
            logs.push((
                format!("{} postgresql", node.name),
                node.dir.join("log/postgresql.log"),
            ));
        }
        logs.into_iter()
            .map(|(name, path)| {
                let text = fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                format!("--- end of {name}'s log ({}) ---\n{tail}", path.display())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn node(&self, name: &str) -> &Node {
        self.nodes
            .iter()
            .find(|node| node.name == name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    fn start_patroni(&mut self, name: &str) {
        let dir = self.node(name).dir.clone();
        let mut command = Command::new(self.venv.join("bin/patroni"));
        command
            .arg(dir.join("patroni.yml"))
            .current_dir(&dir)
            .env_remove("PGHOST")
            .env_remove("PGPORT")
            .env_remove("PGDATA");
        if let Some(user) = &self.run_as {
            user.apply(&mut command);
        }
        self.spawn(name, command, &dir.join("patroni.log"));
    }

    /// Starts `command` in a process group of its own, its output to `log`,
    /// its pid where the watchdog looks for it.
    fn spawn(&mut self, name: &str, mut command: Command, log: &Path) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("opening a log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let pid_file = match name {
            "etcd" => self.dir.join("etcd.pid"),
            node => self.dir.join(node).join("patroni.pid"),
        };
        fs::write(pid_file, child.id().to_string()).expect("writing a pid file");
        self.children.push((name.to_string(), child));
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        // Closing the pipe is the watchdog's signal.
        drop(self.watchdog_pipe.take());
        let started = Instant::now();
        while matches!(self.watchdog.try_wait(), Ok(None)) && started.elapsed() < STOP_TIMEOUT {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Killed by the watchdog, they are ours to reap.
        for (name, child) in &mut self.children {
            while matches!(child.try_wait(), Ok(None)) {
                if started.elapsed() > STOP_TIMEOUT {
                    eprintln!("note: {name} outlived the watchdog: killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Says the caller is skipped, or fails where Patroni's tests are required.
fn skipped<T>(why: &str) -> Option<T> {
    assert!(
        std::env::var("EFFECTWATCH_REQUIRE_PATRONI").as_deref() != Ok("1"),
        "EFFECTWATCH_REQUIRE_PATRONI=1 and {why}"
    );
    eprintln!("skipped: this test runs the ledger on a Patroni cluster, and {why}");
    None
}

fn find_program(name: &str, also_in: &[&str]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(also_in.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The folder of the server binaries, found as src/localpg.rs finds them:
/// `/usr/lib/postgresql/<version>/bin`, highest version first (Debian keeps
/// them off PATH), else the folder `initdb` on PATH really lives in.
fn server_binaries() -> Option<PathBuf> {
    let complete = |dir: &Path| {
        ["postgres", "initdb", "pg_ctl", "pg_basebackup"]
            .iter()
            .all(|binary| dir.join(binary).is_file())
    };
    let mut versioned: Vec<(Vec<u32>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(|part| part.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versioned.sort();
    versioned
        .into_iter()
        .rev()
        .map(|(_, dir)| dir)
        .chain(
            find_program("initdb", &[])
                .and_then(|initdb| initdb.canonicalize().ok()?.parent().map(Path::to_path_buf)),
        )
        .find(|dir| complete(dir))
}

/// Who Patroni and PostgreSQL run as when we are root.
struct ServerUser {
    uid: u32,
    gid: u32,
    home: PathBuf,
}

impl ServerUser {
    fn when_root() -> Option<ServerUser> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let user = nix::unistd::User::from_name("postgres")
            .ok()
            .flatten()
            .expect("running as root, and there is no `postgres` user to run PostgreSQL as");
        Some(ServerUser {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            home: user.dir,
        })
    }

    fn hand_over(&self, path: &Path) {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
            .unwrap_or_else(|e| panic!("handing {} to user postgres: {e}", path.display()));
    }

    /// Whether this user can list and enter `dir`, every folder above it too.
    fn can_reach(&self, dir: &Path) -> bool {
        let mut test = Command::new("/bin/sh");
        test.args(["-c", r#"test -r "$1" && test -x "$1""#, "sh"])
            .arg(dir)
            .current_dir("/");
        self.apply(&mut test);
        test.output().is_ok_and(|output| output.status.success())
    }

    fn apply(&self, command: &mut Command) {
        command
            .uid(self.uid)
            .gid(self.gid)
            .env("HOME", &self.home)
            .env("USER", "postgres")
            .env("LOGNAME", "postgres");
    }
}

/// A fresh folder for the cluster, in memory (`/dev/shm`) when it has room:
/// what is tested is replication between servers, not a disk's flushes.
fn cluster_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let in_memory = shm.is_dir()
        && nix::sys::statvfs::statvfs(shm).is_ok_and(|stats| {
            stats
                .blocks_available()
                .saturating_mul(stats.fragment_size())
                >= 2 << 30
        });
    let base = if in_memory {
        shm.to_path_buf()
    } else {
        PathBuf::from("/tmp")
    };
    tempfile::Builder::new()
        .prefix("ewpatroni-")
        .tempdir_in(&base)
        .unwrap_or_else(|e| {
            panic!(
                "a folder for the Patroni cluster in {}: {e}",
                base.display()
            )
        })
        // The watchdog removes it, after everything in it has stopped.
        .keep()
        // As the kernel names a process's working folder, which the watchdog compares.
        .canonicalize()
        .expect("the cluster's folder")
}

/// Asks the kernel for `count` distinct free ports on 127.0.0.1.
fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port on 127.0.0.1"))
        .collect();
    listeners
        .iter()
        .map(|listener| listener.local_addr().expect("a bound port").port())
        .collect()
}

/// Waits for the pipe on its stdin to close (the cluster dropped, or this
/// process gone), then stops everything the cluster started and removes
/// its folder. Patroni first, so that it restarts nothing; each postmaster
/// with SIGQUIT (immediate shutdown: it ends its backends and frees its
/// shared memory), killed with its process group if it lingers; etcd last.
/// A pid file may outlive its process (a node the test killed), and its
/// pid be another's by then: a process is ours only if it works in the
/// folder ours did (Patroni and etcd are started there, and a postmaster
/// moves into its data directory).
const WATCHDOG_SCRIPT: &str = r#"
dir=$1
cat >/dev/null
ours() { [ "$(readlink "/proc/$2/cwd" 2>/dev/null)" = "$1" ]; }
kill_group_of() {
  [ -f "$2" ] || return 0
  pid=$(cat "$2")
  ours "$1" "$pid" && kill -KILL -"$pid" 2>/dev/null
}
for file in "$dir"/*/patroni.pid; do
  kill_group_of "${file%/*}" "$file"
done
postmasters=
for file in "$dir"/*/data/postmaster.pid; do
  [ -f "$file" ] || continue
  read -r pm < "$file"
  ours "${file%/*}" "$pm" && kill -QUIT "$pm" 2>/dev/null && postmasters="$postmasters $file:$pm"
done
i=0
while [ "$i" -lt 100 ]; do
  alive=
  for entry in $postmasters; do
    [ -f "${entry%:*}" ] && kill -0 "${entry##*:}" 2>/dev/null && alive=1
  done
  [ -z "$alive" ] && break
  sleep 0.1
  i=$((i + 1))
done
for entry in $postmasters; do
  file=${entry%:*} pm=${entry##*:}
  if ours "${file%/*}" "$pm"; then
    read -r _ _ _ _ group _ < "/proc/$pm/stat"
    kill -KILL -"$group" 2>/dev/null
  fi
done
# A postmaster killed outright leaves its System V segment: its id is on
# line 7 of the pid file it left.
for file in "$dir"/*/data/postmaster.pid; do
  [ -f "$file" ] || continue
  set -- $(sed -n 7p "$file")
  [ -n "${2:-}" ] && ipcrm -m "$2" 2>/dev/null
done
kill_group_of "$dir" "$dir/etcd.pid"
rm -rf -- "$dir"
"#;

fn start_watchdog(dir: &Path) -> (Child, ChildStdin) {
    let mut watchdog = Command::new("/bin/sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("effectwatch-patroni-watchdog")
        .arg(dir)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Out of our process group, so a Ctrl-C aimed at us does not kill it first.
        .process_group(0)
        .spawn()
        .expect("starting the Patroni cluster's watchdog");
    let pipe = watchdog.stdin.take().expect("the watchdog's stdin");
    (watchdog, pipe)
}

/// The virtual environment with Patroni, built once under `target/` and
/// kept. Err: why it cannot be built here (no python3 that makes one).
fn patroni_venv(run_as: Option<&ServerUser>) -> Result<PathBuf, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| build_venv(run_as)).clone()
}

fn build_venv(run_as: Option<&ServerUser>) -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut home =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    fs::create_dir_all(&home).expect("creating the target folder");
    // The server's user runs Patroni from it: a checkout it cannot reach
    // (under /root, say) keeps its venv in the temporary folder instead.
    if let Some(user) = run_as
        && !user.can_reach(&home)
    {
        home = std::env::temp_dir().join("effectwatch-patroni");
        fs::create_dir_all(&home).expect("creating a folder for the venv");
    }
    let venv = home.join("patroni-venv");
    let marker = venv.join("effectwatch-installed");
    // As root, an interpreter the postgres user can run as well: pyenv's,
    // say, lives under /root.
    let python = if run_as.is_some() && Path::new("/usr/bin/python3").is_file() {
        PathBuf::from("/usr/bin/python3")
    } else {
        PathBuf::from("python3")
    };
    let wanted = format!("{REQUIREMENT} {}", python.display());

    let lock = File::create(home.join("patroni-venv.lock")).expect("creating the venv's lock");
    lock.lock().expect("locking the venv");
    if fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
        if venv.exists() {
            fs::remove_dir_all(&venv).expect("removing an incomplete venv");
        }
        let made = Command::new(&python)
            .args(["-m", "venv"])
            .arg(&venv)
            .output();
        match made {
            Ok(output) if output.status.success() => {}
            Ok(output) => {
                return Err(format!(
                    "{} cannot make a virtual environment: {}",
                    python.display(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
            Err(e) => return Err(format!("{} cannot be run: {e}", python.display())),
        }
        super::toolchain::run(
            "installing Patroni from PyPI",
            Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .arg(REQUIREMENT),
        );
        fs::write(&marker, &wanted).expect("marking the venv complete");
    }
    drop(lock);

    let mut check = Command::new(venv.join("bin/patroni"));
    check.arg("--version").current_dir("/");
    if let Some(user) = run_as {
        user.apply(&mut check);
    }
    let reached = check.output().is_ok_and(|output| output.status.success());
    assert!(
        reached,
        "Patroni in {} does not run{}",
        venv.display(),
        if run_as.is_some() {
            " as the postgres user (PostgreSQL refuses to run as root)"
        } else {
            ""
        }
    );
    Ok(venv)
}
