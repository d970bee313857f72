//! What `effectwatch certify` reads of the ledger around a run against a
//! tool server: whether its login may settle what the run leaves open, and
//! the effects the run made, as that login reads them.

use super::{LedgerError, LedgerPool};

/// What certification settles with: a run that cannot call these leaves
/// its effects for a person. A login that may settle must be allowed them all.
const SETTLING_FUNCTIONS: [&str; 3] = [
    "ledger.op_resolve(text, bigint, text, text, text, text, boolean)",
    "ledger.op_cancel(text, bigint, text, text)",
    "ledger.op_acknowledge_duplicates(text, bigint, text, text)",
];

/// Whether the login of `pool` may settle what a run leaves open: call the
/// operator functions and read every effect.
pub async fn may_settle(pool: &LedgerPool) -> Result<bool, LedgerError> {
    let mut allowed = sqlx::query_scalar::<_, bool>(
        "select has_table_privilege('ledger.effects', 'select')
            and has_function_privilege('ledger.refusals(text[])', 'execute')",
    )
    .fetch_one(pool)
    .await?;
    for function in SETTLING_FUNCTIONS {
        allowed &= sqlx::query_scalar::<_, bool>("select has_function_privilege($1, 'execute')")
            .bind(function)
            .fetch_one(pool)
            .await?;
    }
    Ok(allowed)
}

/// One effect of a run, as a login reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunEffect {
    pub op_key: String,
    pub state: String,
    pub dispatched: bool,
    pub version: i64,
}

/// The effects under `keys` that `requested_by` made, oldest first.
pub async fn effects_made(
    pool: &LedgerPool,
    keys: &[String],
    requested_by: &str,
) -> Result<Vec<RunEffect>, LedgerError> {
    Ok(sqlx::query_as::<_, RunEffect>(
        "select op_key, state, dispatched_at is not null as dispatched, version
           from ledger.effects where op_key = any($1) and requested_by = $2 order by id",
    )
    .bind(keys)
    .bind(requested_by)
    .fetch_all(pool)
    .await?)
}

/// The effect under `op_key`, if `requested_by` made it.
pub async fn effect_made(
    pool: &LedgerPool,
    op_key: &str,
    requested_by: &str,
) -> Result<Option<RunEffect>, LedgerError> {
    Ok(sqlx::query_as::<_, RunEffect>(
        "select op_key, state, dispatched_at is not null as dispatched, version
           from ledger.effects where op_key = $1 and requested_by = $2",
    )
    .bind(op_key)
    .bind(requested_by)
    .fetch_optional(pool)
    .await?)
}

/// (key, version) of each effect under `keys` made by `requested_by`
/// whose repeated calls may be acknowledged now, oldest first.
pub async fn repeats_to_acknowledge(
    pool: &LedgerPool,
    keys: &[String],
    requested_by: &str,
) -> Result<Vec<(String, i64)>, LedgerError> {
    Ok(sqlx::query_as(
        "select e.op_key, e.version
           from ledger.refusals($1) r join ledger.effects e on e.op_key = r.op_key
          where e.requested_by = $2 and not r.refused ? 'acknowledge_duplicates'
          order by e.id",
    )
    .bind(keys)
    .bind(requested_by)
    .fetch_all(pool)
    .await?)
}
