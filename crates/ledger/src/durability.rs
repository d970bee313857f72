//! Whether a write the ledger acknowledged survives losing this server:
//! `synchronous_commit`, the synchronous standbys named and connected, and
//! the logins that turn synchronous commit down for themselves. With
//! asynchronous replication a failover can lose a committed `proceed` or
//! `claimed`; the agent's retry on the new primary then proceeds again.

use serde::Serialize;

use super::LedgerError;

/// What losing this server can take from what was acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// A failover can lose acknowledged writes.
    Failover,
    /// A crash of this server alone can lose them, or commits wait on a
    /// standby that is not there.
    Severe,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Durability {
    pub synchronous_commit: String,
    pub synchronous_standby_names: String,
    /// Connected to a standby: the primary's settings decide, not these.
    pub in_recovery: bool,
    pub standbys: Vec<Standby>,
    /// Logins whose own `synchronous_commit` (alter role … set) is off or local.
    pub weaker_logins: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Standby {
    pub name: String,
    /// None: this login may not see it (pg_monitor shows it).
    pub state: Option<String>,
    pub sync_state: Option<String>,
}

/// What the settings mean for an acknowledged write, in one sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// None: acknowledged writes survive a failover.
    pub risk: Option<Risk>,
    pub sentence: String,
    /// Standbys that confirm each commit before it is acknowledged.
    pub synchronous_standbys: usize,
}

pub async fn measure(conn: &mut super::LedgerTransaction<'_>) -> Result<Durability, LedgerError> {
    let (synchronous_commit, synchronous_standby_names, in_recovery): (String, String, bool) =
        sqlx::query_as(
            "select current_setting('synchronous_commit'),
                    current_setting('synchronous_standby_names'),
                    pg_is_in_recovery()",
        )
        .fetch_one(&mut *conn)
        .await?;
    let standbys = sqlx::query_as::<_, Standby>(
        "select coalesce(application_name, '') as name, state, sync_state
           from pg_stat_replication order by application_name",
    )
    .fetch_all(&mut *conn)
    .await?;
    let weaker_logins = sqlx::query_scalar(
        "select distinct r.rolname
           from pg_db_role_setting s
           join pg_roles r on r.oid = s.setrole
          cross join lateral unnest(s.setconfig) as c(setting)
          where s.setdatabase in (0, (select oid from pg_database where datname = current_database()))
            and c.setting in ('synchronous_commit=off', 'synchronous_commit=local')
          order by 1",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(Durability {
        synchronous_commit,
        synchronous_standby_names,
        in_recovery,
        standbys,
        weaker_logins,
    })
}

impl Verdict {
    /// The verdict as people read it: `failover-safe: …` or
    /// `⚠ not failover-safe: …`.
    pub fn said(&self) -> String {
        match self.risk {
            None => format!("failover-safe: {}", self.sentence),
            Some(_) => format!("⚠ not failover-safe: {}", self.sentence),
        }
    }
}

impl Durability {
    pub fn verdict(&self) -> Verdict {
        let synchronous = self
            .standbys
            .iter()
            .filter(|s| {
                s.state.as_deref() == Some("streaming")
                    && matches!(s.sync_state.as_deref(), Some("sync" | "quorum"))
            })
            .count();
        let verdict = |risk, sentence: String| Verdict {
            risk,
            sentence,
            synchronous_standbys: synchronous,
        };
        if self.in_recovery {
            return verdict(
                Some(Risk::Failover),
                "connected to a standby: ask the primary whether its writes survive a failover"
                    .into(),
            );
        }
        match self.synchronous_commit.as_str() {
            "off" => {
                return verdict(
                    Some(Risk::Severe),
                    "synchronous_commit is off: a crash of this server alone loses acknowledged ledger writes"
                        .into(),
                );
            }
            "local" => {
                return verdict(
                    Some(Risk::Failover),
                    "synchronous_commit is local: writes are acknowledged before any standby has them, so a failover can lose them"
                        .into(),
                );
            }
            _ => {}
        }
        if !self.weaker_logins.is_empty() {
            return verdict(
                Some(Risk::Failover),
                format!(
                    "login(s) {} set synchronous_commit off or local for themselves: their writes can be lost in a failover",
                    self.weaker_logins.join(", ")
                ),
            );
        }
        if self.synchronous_standby_names.trim().is_empty() {
            let sentence = match self.standbys.len() {
                0 => "no standby: a failover has nowhere to go, and a new primary built from a backup lacks the latest writes".to_string(),
                n => format!(
                    "asynchronous replication to {n} standby(s): a failover can lose writes already acknowledged to agents (set synchronous_standby_names)"
                ),
            };
            return verdict(Some(Risk::Failover), sentence);
        }
        if !self.standbys.is_empty() && self.standbys.iter().all(|s| s.sync_state.is_none()) {
            return verdict(
                Some(Risk::Failover),
                "cannot see the standbys' state: grant pg_monitor to this login".into(),
            );
        }
        if synchronous == 0 {
            return verdict(
                Some(Risk::Severe),
                format!(
                    "no synchronous standby of '{}' is connected: commits wait until one is",
                    self.synchronous_standby_names
                ),
            );
        }
        let caveat = match self.synchronous_commit.as_str() {
            "remote_write" => {
                " (remote_write: not if the standby's machine fails at the same moment)"
            }
            _ => "",
        };
        verdict(
            None,
            format!(
                "acknowledged writes are on {synchronous} synchronous standby(s) before agents hear of them{caveat}"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn durability(commit: &str, names: &str, standbys: &[(&str, &str)]) -> Durability {
        Durability {
            synchronous_commit: commit.into(),
            synchronous_standby_names: names.into(),
            in_recovery: false,
            standbys: standbys
                .iter()
                .map(|(name, sync)| Standby {
                    name: name.to_string(),
                    state: Some("streaming".into()),
                    sync_state: Some(sync.to_string()),
                })
                .collect(),
            weaker_logins: Vec::new(),
        }
    }

    #[test]
    fn only_a_connected_synchronous_standby_makes_writes_survive_a_failover() {
        let level = |d: Durability| d.verdict().risk;
        assert_eq!(level(durability("on", "", &[])), Some(Risk::Failover));
        assert_eq!(
            level(durability("on", "", &[("s1", "async")])),
            Some(Risk::Failover)
        );
        assert_eq!(level(durability("on", "s1", &[("s1", "sync")])), None);
        assert_eq!(level(durability("on", "s1", &[])), Some(Risk::Severe));
        assert_eq!(
            level(durability("off", "s1", &[("s1", "sync")])),
            Some(Risk::Severe)
        );
        assert_eq!(
            level(durability("local", "s1", &[("s1", "sync")])),
            Some(Risk::Failover)
        );
        let mut weak = durability("on", "s1", &[("s1", "sync")]);
        weak.weaker_logins = vec!["agents".into()];
        assert!(weak.verdict().sentence.contains("agents"));
    }
}
