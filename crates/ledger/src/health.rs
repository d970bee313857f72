//! The figures `effectwatch check` judges beyond the pane counts: work owed
//! and nobody's, actions with no policy, suspected doubles, and triggers
//! that would let a write past the ledger's guarantees.

use super::{LedgerError, LedgerTransaction};

/// What a check reads in its snapshot besides the panes.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// See [`weak_triggers`].
    pub weak_triggers: Vec<String>,
    /// Next steps owed (`ledger.next_steps` not done).
    pub steps_owed: i64,
    /// `KEY: what is owed` for work nobody is on (`ledger.unowned_work`),
    /// at most `unowned_shown`, by key.
    pub unowned_work: Vec<String>,
    /// `action (N effects)` for actions used in the last 30 days with no
    /// policy of their own, most used first.
    pub actions_without_policy: Vec<String>,
    /// Effects in suspected double effects, when asked for.
    pub suspected: Option<i64>,
}

pub async fn figures(
    tx: &mut LedgerTransaction<'_>,
    unowned_shown: i64,
    with_suspected: bool,
) -> Result<Figures, LedgerError> {
    let weak_triggers = weak_triggers(tx).await?;
    let steps_owed: i64 =
        sqlx::query_scalar("select count(*) from ledger.next_steps where done_at is null")
            .fetch_one(&mut *tx)
            .await?;
    let unowned_work: Vec<String> = sqlx::query_scalar(
        "select op_key || ': ' || owed from ledger.unowned_work order by op_key limit $1",
    )
    .bind(unowned_shown)
    .fetch_all(&mut *tx)
    .await?;
    let actions_without_policy: Vec<String> = sqlx::query_scalar(
        "select action || ' (' || effects || ' effects)' from ledger.actions_without_policy
          order by effects desc, action",
    )
    .fetch_all(&mut *tx)
    .await?;
    let suspected = if with_suspected {
        Some(
            sqlx::query_scalar::<_, i64>("select count(*) from ledger.suspected_double_effects")
                .fetch_one(&mut *tx)
                .await?,
        )
    } else {
        None
    };
    Ok(Figures {
        weak_triggers,
        steps_owed,
        unowned_work,
        actions_without_policy,
        suspected,
    })
}

/// Triggers on the ledger's tables not set to ENABLE ALWAYS ('A'); what
/// `alter table … disable trigger`, or a plain `enable trigger`, leaves.
async fn weak_triggers(tx: &mut LedgerTransaction<'_>) -> Result<Vec<String>, LedgerError> {
    Ok(sqlx::query_scalar(
        // A month of a history table is named by its table: its triggers
        // are the table's, cloned.
        "select distinct coalesce(parent.relname, c.relname) || '.' || t.tgname
           from pg_trigger t
           join pg_class c on c.oid = t.tgrelid
           join pg_namespace n on n.oid = c.relnamespace
           left join pg_inherits i on i.inhrelid = c.oid
           left join pg_class parent on parent.oid = i.inhparent
          where n.nspname = 'ledger' and not t.tgisinternal and t.tgenabled <> 'A'
          order by 1",
    )
    .fetch_all(tx)
    .await?)
}
