//! The panes as they were at a past instant (`effectwatch --at T`), read
//! from the `ledger.*_at(at_time)` functions of `sql/0007_panes.sql`: the
//! same rules as the live views, over the ledger as it stood at T. Rows have
//! the live panes' types, so the console shows them unchanged; ages are
//! measured at that instant, and `version` is the one the effect had then,
//! so an action taken from the past passes only if nothing changed since.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, Postgres, QueryBuilder};

use super::LedgerError;
use super::panes::{Filter, Pane, PaneCount, PaneRows, fetch_window, pane_sql};

/// Reads a window of a pane as it was at `at`, in the live pane's order.
pub async fn fetch_at<'c>(
    executor: impl PgExecutor<'c>,
    pane: Pane,
    at: DateTime<Utc>,
    filter: &Filter,
    limit: i64,
    offset: i64,
) -> Result<PaneRows, LedgerError> {
    let (select, _, _) = pane_sql(pane);
    let mut query = QueryBuilder::<Postgres>::new(format!("{select} from {}_at(", pane.view()));
    query.push_bind(at);
    query.push(") v where true");
    fetch_window(executor, pane, query, filter, limit, offset).await
}

/// Items per pane at `at`, as `ledger.pane_counts` reported them then.
pub async fn counts_at<'c>(
    executor: impl PgExecutor<'c>,
    at: DateTime<Utc>,
) -> Result<Vec<PaneCount>, LedgerError> {
    Ok(sqlx::query_as::<_, PaneCount>(
        "select pane, items, (extract(epoch from oldest) * 1000)::bigint as oldest_ms
           from ledger.pane_counts_at($1)",
    )
    .bind(at)
    .fetch_all(executor)
    .await?)
}

/// How many items of a pane matched a filter at `at`.
pub async fn count_at<'c>(
    executor: impl PgExecutor<'c>,
    pane: Pane,
    at: DateTime<Utc>,
    filter: &Filter,
) -> Result<i64, LedgerError> {
    let mut query =
        QueryBuilder::<Postgres>::new(format!("select count(*) from {}_at(", pane.view()));
    query.push_bind(at);
    query.push(") v where true");
    filter.push_sql(&mut query, pane);
    Ok(query.build_query_scalar().fetch_one(executor).await?)
}
