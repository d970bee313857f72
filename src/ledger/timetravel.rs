//! The panes as they were at a past instant (`effectwatch --at T`), rebuilt
//! by the `ledger.*_at(at_time)` functions of `sql/0010_reports.sql` from
//! the effect history. Rows have the live panes' types, so the console shows
//! them unchanged; ages are measured at that instant, and `version` is 0,
//! which no effect ever has, so an action taken from the past is refused.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, Postgres, QueryBuilder};

use super::LedgerError;
use super::panes::{Filter, Pane, PaneCount, PaneRows};

/// Reads a window of a pane as it was at `at`, in the live pane's order.
pub async fn fetch_at<'c>(
    executor: impl PgExecutor<'c>,
    pane: Pane,
    at: DateTime<Utc>,
    filter: &Filter,
    limit: i64,
    offset: i64,
) -> Result<PaneRows, LedgerError> {
    let (select, columns, order) = pane_sql(pane);
    let mut query = QueryBuilder::<Postgres>::new(select);
    query.push_bind(at);
    query.push(") v where true");
    push_filter(&mut query, filter, columns);
    query.push(order);
    query.push(" limit ");
    query.push_bind(limit.max(0));
    query.push(" offset ");
    query.push_bind(offset.max(0));
    let rows = match pane {
        Pane::Overdue => PaneRows::Overdue(query.build_query_as().fetch_all(executor).await?),
        Pane::Unknown => PaneRows::Unknown(query.build_query_as().fetch_all(executor).await?),
        Pane::Duplicates => PaneRows::Duplicates(query.build_query_as().fetch_all(executor).await?),
        Pane::Held => PaneRows::Held(query.build_query_as().fetch_all(executor).await?),
    };
    Ok(rows)
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
    let (_, columns, _) = pane_sql(pane);
    let mut query =
        QueryBuilder::<Postgres>::new(format!("select count(*) from {}(", function_name(pane)));
    query.push_bind(at);
    query.push(") v where true");
    push_filter(&mut query, filter, columns);
    Ok(query.build_query_scalar().fetch_one(executor).await?)
}

fn function_name(pane: Pane) -> &'static str {
    match pane {
        Pane::Overdue => "ledger.overdue_pending_at",
        Pane::Unknown => "ledger.unknown_outcomes_at",
        Pane::Duplicates => "ledger.duplicate_attempts_at",
        Pane::Held => "ledger.held_conflicts_at",
    }
}

type FilterColumns = &'static [(&'static str, Option<&'static str>)];

const EFFECT_COLUMNS: FilterColumns = &[
    ("key", Some("v.op_key")),
    ("target", Some("v.target")),
    ("action", Some("v.action")),
    ("provider", Some("v.provider")),
    ("requester", Some("v.requested_by")),
];

/// Select list (ending in the function's opening parenthesis), the filter
/// columns and the order of each pane: those of `panes.rs`, over the
/// functions that rebuild the views.
fn pane_sql(pane: Pane) -> (&'static str, FilterColumns, &'static str) {
    match pane {
        Pane::Overdue => (
            "select v.op_key, v.effect_id, v.action, v.target, v.amount_minor, v.currency, v.provider,
                    v.requested_by, v.created_at, v.dispatched, v.deadline_at,
                    (extract(epoch from v.overdue_by) * 1000)::bigint as overdue_ms,
                    (extract(epoch from v.age) * 1000)::bigint as age_ms, v.version
               from ledger.overdue_pending_at(",
            EFFECT_COLUMNS,
            " order by v.deadline_at, v.effect_id",
        ),
        Pane::Unknown => (
            "select v.op_key, v.effect_id, v.action, v.target, v.amount_minor, v.currency, v.provider,
                    v.requested_by, v.unknown_since,
                    (extract(epoch from v.unknown_for) * 1000)::bigint as unknown_ms,
                    v.attempts, v.last_error, v.reconciliations, v.last_finding, v.findings,
                    v.attention, v.version
               from ledger.unknown_outcomes_at(",
            EFFECT_COLUMNS,
            " order by v.unknown_since, v.effect_id",
        ),
        Pane::Duplicates => (
            "select v.op_key, v.effect_id, v.action, v.target, v.state, v.attempts, v.replays,
                    v.in_flight, v.mismatches, v.late_results, v.first_seen, v.last_seen,
                    coalesce(v.requesters, '{}') as requesters, v.has_mismatch, v.version
               from ledger.duplicate_attempts_at(",
            &[
                ("key", Some("v.op_key")),
                ("target", Some("v.target")),
                ("action", Some("v.action")),
                ("provider", None),
                ("requester", Some("array_to_string(v.requesters, ' ')")),
            ],
            " order by v.has_mismatch desc, v.last_seen desc, v.effect_id",
        ),
        Pane::Held => (
            "select v.op_key, v.effect_id, v.target, v.action, v.amount_minor, v.currency,
                    v.requested_by, v.held_since,
                    (extract(epoch from v.held_for) * 1000)::bigint as held_ms,
                    v.holder_op_key, v.holder_effect_id, v.holder_state,
                    (extract(epoch from v.holder_age) * 1000)::bigint as holder_age_ms,
                    v.holder_amount_minor, v.holder_currency, v.version
               from ledger.held_conflicts_at(",
            &[
                ("key", Some("v.op_key")),
                ("target", Some("v.target")),
                ("action", Some("v.action")),
                ("provider", None),
                ("requester", Some("v.requested_by")),
            ],
            " order by v.target, v.held_since, v.effect_id",
        ),
    }
}

/// The filter semantics of the live panes (each word must match one of the
/// fields it names, case-insensitive substring).
// Mirrors the private `Filter::push_sql` of panes.rs; should that become
// pub(crate), this goes.
fn push_filter(query: &mut QueryBuilder<Postgres>, filter: &Filter, columns: FilterColumns) {
    for (field, value) in &filter.terms {
        let pattern = format!("%{}%", escape_like(value));
        let matching: Vec<&str> = columns
            .iter()
            .filter(|(name, column)| {
                column.is_some() && field.as_deref().is_none_or(|f| f == *name)
            })
            .filter_map(|(_, column)| *column)
            .collect();
        if matching.is_empty() {
            query.push(" and false");
            continue;
        }
        query.push(" and (");
        for (index, column) in matching.iter().enumerate() {
            if index > 0 {
                query.push(" or ");
            }
            query.push(format!("{column} ilike "));
            query.push_bind(pattern.clone());
        }
        query.push(")");
    }
}

/// `value` as a literal inside an ILIKE pattern.
pub fn escape_like(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}
