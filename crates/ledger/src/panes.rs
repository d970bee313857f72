//! The four panes, read from their views. Each query is bounded by a limit
//! and filtered in SQL, so a poll costs what is shown, not what is open.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, Postgres, QueryBuilder};

use super::LedgerError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pane {
    Overdue,
    Unknown,
    Duplicates,
    Held,
}

impl Pane {
    pub const ALL: [Pane; 4] = [Pane::Overdue, Pane::Unknown, Pane::Duplicates, Pane::Held];

    pub fn name(self) -> &'static str {
        match self {
            Pane::Overdue => "overdue",
            Pane::Unknown => "unknown",
            Pane::Duplicates => "duplicates",
            Pane::Held => "held",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Pane::Overdue => "Overdue pending",
            Pane::Unknown => "Unknown outcomes",
            Pane::Duplicates => "Duplicate attempts",
            Pane::Held => "Held conflicts",
        }
    }

    pub fn view(self) -> &'static str {
        match self {
            Pane::Overdue => "ledger.overdue_pending",
            Pane::Unknown => "ledger.unknown_outcomes",
            Pane::Duplicates => "ledger.duplicate_attempts",
            Pane::Held => "ledger.held_conflicts",
        }
    }
}

impl fmt::Display for Pane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A pane's name as the ledger's functions write it.
impl TryFrom<String> for Pane {
    type Error = LedgerError;
    fn try_from(name: String) -> Result<Self, Self::Error> {
        name.parse().map_err(LedgerError::Database)
    }
}

impl FromStr for Pane {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Pane::ALL
            .into_iter()
            .find(|pane| pane.name() == text)
            .ok_or_else(|| {
                format!("unknown pane {text:?} (expected overdue, unknown, duplicates or held)")
            })
    }
}

/// One column of a pane, as the console and `effectwatch list` both print
/// it: the pane's one spec, kept beside the queries that fill it. A row's
/// cells come in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaneColumn {
    pub title: &'static str,
    /// The least width the console gives it.
    pub width: u16,
    /// Flexible columns share the console's room left over.
    pub flexible: bool,
    /// The item's own key (not a holder's): what an action names, and what
    /// `list` prints the item's version after.
    pub key: bool,
}

impl PaneColumn {
    const fn new(title: &'static str, width: u16, flexible: bool) -> PaneColumn {
        PaneColumn {
            title,
            width,
            flexible,
            key: false,
        }
    }

    /// The column of the item's key.
    const fn key(mut self) -> PaneColumn {
        self.key = true;
        self
    }
}

const OVERDUE_COLUMNS: [PaneColumn; 8] = [
    PaneColumn::new("key", 24, true).key(),
    PaneColumn::new("action", 8, false),
    PaneColumn::new("target", 16, true),
    PaneColumn::new("amount", 12, false),
    PaneColumn::new("age", 7, false),
    PaneColumn::new("past window", 11, false),
    PaneColumn::new("dispatched", 12, false),
    PaneColumn::new("requester", 10, false),
];

const UNKNOWN_COLUMNS: [PaneColumn; 8] = [
    PaneColumn::new("key", 24, true).key(),
    PaneColumn::new("action", 8, false),
    PaneColumn::new("target", 16, true),
    PaneColumn::new("amount", 12, false),
    PaneColumn::new("unknown for", 11, false),
    PaneColumn::new("tries", 5, false),
    PaneColumn::new("last error", 16, true),
    PaneColumn::new("reconciled", 20, false),
];

const DUPLICATES_COLUMNS: [PaneColumn; 10] = [
    PaneColumn::new("key", 24, true).key(),
    PaneColumn::new("needs", 16, true),
    PaneColumn::new("state", 11, false),
    PaneColumn::new("tries", 5, false),
    PaneColumn::new("replays", 7, false),
    PaneColumn::new("in flight", 9, false),
    PaneColumn::new("mismatch", 9, false),
    PaneColumn::new("first seen", 14, false),
    PaneColumn::new("last seen", 14, false),
    PaneColumn::new("requesters", 14, true),
];

const HELD_COLUMNS: [PaneColumn; 8] = [
    PaneColumn::new("target", 16, true),
    PaneColumn::new("held key", 22, true).key(),
    PaneColumn::new("amount", 12, false),
    PaneColumn::new("held for", 9, false),
    PaneColumn::new("held by", 22, true),
    PaneColumn::new("holder", 10, false),
    PaneColumn::new("holder amount", 13, false),
    PaneColumn::new("holder age", 10, false),
];

impl Pane {
    /// The pane's columns, in the order of its rows' cells.
    pub const fn columns(self) -> &'static [PaneColumn] {
        match self {
            Pane::Overdue => &OVERDUE_COLUMNS,
            Pane::Unknown => &UNKNOWN_COLUMNS,
            Pane::Duplicates => &DUPLICATES_COLUMNS,
            Pane::Held => &HELD_COLUMNS,
        }
    }

    /// Where the item's key is among [`Pane::columns`]: each pane marks
    /// exactly one.
    pub fn key_column(self) -> usize {
        self.columns()
            .iter()
            .position(|column| column.key)
            .unwrap_or(0)
    }
}

impl PaneRows {
    /// The pane the rows are of.
    pub fn pane(&self) -> Pane {
        match self {
            PaneRows::Overdue(_) => Pane::Overdue,
            PaneRows::Unknown(_) => Pane::Unknown,
            PaneRows::Duplicates(_) => Pane::Duplicates,
            PaneRows::Held(_) => Pane::Held,
        }
    }
}

/// The fields a filter may name; plain words match any of them.
pub const FILTER_FIELDS: [&str; 7] = [
    "key",
    "target",
    "action",
    "provider",
    "requester",
    "state",
    "operator",
];

/// Words of a filter that pick items by what they are, not by their text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Scope {
    /// Duplicates: only the keys the ledger answered by itself (replayed,
    /// told to wait, held, stopped, re-run under a safe-retry policy).
    ReplaysOnly,
    /// Duplicates: those keys too, beside the ones that need a look.
    WithReplays,
    /// Duplicates: keys asked again with other parameters.
    Mismatch,
    /// Held: items whose holder has settled, so a person can release or
    /// cancel them now.
    HolderSettled,
    /// Held: items whose key nobody asked for within its pending
    /// window: its agent stopped waiting, and released it would go to
    /// Overdue undispatched.
    StoppedAsking,
}

/// Each scope as a filter spells it.
pub const SCOPE_WORDS: [(&str, Scope); 5] = [
    ("replays-only", Scope::ReplaysOnly),
    ("with-replays", Scope::WithReplays),
    ("mismatch", Scope::Mismatch),
    ("holder:settled", Scope::HolderSettled),
    ("stopped-asking", Scope::StoppedAsking),
];

/// Whether a held effect's key is still being asked for, by the instant
/// the held view (aliased `v`) is read at: an agent that waits for a hold
/// to end asks again (each call is an attempt, `held` while it lasts), so
/// its last ask — the first, that made the effect, or a later attempt —
/// lies within the effect's pending window. One whose last ask is older than the window
/// has stopped, however often it asked before, and its effect, released,
/// goes to Overdue undispatched. Served by the attempts' (effect_id, at)
/// index.
macro_rules! still_asking {
    () => {
        "(select e.created_at > v.held_since + v.held_for - e.pending_window \
                 or exists (select 1 from ledger.attempts a where a.effect_id = e.id \
                   and a.at > v.held_since + v.held_for - e.pending_window \
                   and a.at <= v.held_since + v.held_for) \
            from ledger.effects e where e.id = v.effect_id)"
    };
}

impl Scope {
    pub fn word(self) -> &'static str {
        SCOPE_WORDS
            .iter()
            .find(|(_, scope)| *scope == self)
            .map(|(word, _)| *word)
            .unwrap_or("?")
    }

    /// Whether it only widens what a pane shows: a view it means nothing to
    /// ignores it rather than showing nothing.
    pub fn widens(self) -> bool {
        self == Scope::WithReplays
    }

    /// The condition on `pane`'s view (aliased `v`); None: the pane has no
    /// such items.
    fn condition(self, pane: Pane) -> Option<&'static str> {
        match (self, pane) {
            (Scope::ReplaysOnly, Pane::Duplicates) => Some("not v.needs_look"),
            (Scope::Mismatch, Pane::Duplicates) => Some("v.has_mismatch"),
            (Scope::HolderSettled, Pane::Held) => {
                Some("v.holder_state not in ('pending', 'unknown', 'held')")
            }
            (Scope::StoppedAsking, Pane::Held) => Some(concat!("not ", still_asking!())),
            (Scope::WithReplays, _) => Some("true"),
            _ => None,
        }
    }
}

/// An operator's filter: words, each plain (matches key, target, action,
/// provider or requester), `field:value`, or a scope word (`replays-only`,
/// `with-replays`, `mismatch`, `holder:settled`, `stopped-asking`); all
/// words must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub terms: Vec<(Option<String>, String)>,
    pub scopes: Vec<Scope>,
}

impl Filter {
    /// A word whose prefix is not a field name (`invoice:INV-402`) is plain
    /// text: keys and targets are full of colons.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut filter = Filter::default();
        for word in text.split_whitespace() {
            if let Some((_, scope)) = SCOPE_WORDS
                .iter()
                .find(|(spelled, _)| spelled.eq_ignore_ascii_case(word))
            {
                if !filter.scopes.contains(scope) {
                    filter.scopes.push(*scope);
                }
                continue;
            }
            match word.split_once(':') {
                Some((field, value)) if FILTER_FIELDS.contains(&field) => {
                    if value.is_empty() {
                        return Err(format!("{field}: needs a value, e.g. {field}:INV-402"));
                    }
                    filter
                        .terms
                        .push((Some(field.to_string()), value.to_string()))
                }
                _ => filter.terms.push((None, word.to_string())),
            }
        }
        if filter.scopes.contains(&Scope::ReplaysOnly)
            && filter.scopes.contains(&Scope::WithReplays)
        {
            return Err("replays-only and with-replays ask for different things: pick one".into());
        }
        Ok(filter)
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty() && self.scopes.is_empty()
    }

    /// Whether the duplicates pane lists the keys only replayed under it
    /// (`with-replays`, `replays-only`); by default it counts them.
    pub fn lists_replays(&self) -> bool {
        self.scopes
            .iter()
            .any(|scope| matches!(scope, Scope::WithReplays | Scope::ReplaysOnly))
    }

    /// Whether it picks items only by text (no scope narrows what a view shows).
    pub fn only_text(&self) -> bool {
        self.scopes.iter().all(|scope| scope.widens())
    }

    /// Whether a row of a view filtered in Rust rather than SQL
    /// (escalations, audit, finance) matches, meaning what a pane's SQL
    /// filter means: every term must match, `field:value` searching that
    /// field only (a row without it matches nothing), a plain word any
    /// field the row has. A scope names items of the panes: nothing here.
    pub fn matches_fields(&self, fields: &[(&str, &str)]) -> bool {
        self.only_text()
            && self.terms.iter().all(|(field, value)| {
                let value = value.to_lowercase();
                fields
                    .iter()
                    .filter(|(name, _)| field.as_deref().is_none_or(|wanted| wanted == *name))
                    .any(|(_, text)| text.to_lowercase().contains(&value))
            })
    }

    /// The filter with `scope` added, or taken away when it is there.
    pub fn toggled(&self, scope: Scope) -> Filter {
        let mut toggled = self.clone();
        if let Some(at) = toggled.scopes.iter().position(|s| *s == scope) {
            toggled.scopes.remove(at);
        } else {
            toggled.scopes.retain(|s| {
                !matches!(
                    (s, scope),
                    (Scope::ReplaysOnly, Scope::WithReplays)
                        | (Scope::WithReplays, Scope::ReplaysOnly)
                )
            });
            toggled.scopes.push(scope);
        }
        toggled
    }

    /// The filter as an operator would type it.
    pub fn text(&self) -> String {
        let mut words: Vec<String> = self
            .terms
            .iter()
            .map(|(field, value)| match field {
                Some(field) => format!("{field}:{value}"),
                None => value.clone(),
            })
            .collect();
        words.extend(self.scopes.iter().map(|scope| scope.word().to_string()));
        words.join(" ")
    }

    /// Appends ` and (...)` clauses for `pane`'s view aliased `v`: its
    /// default scope (the duplicates pane lists the keys that need a look
    /// unless told otherwise), the scopes, and the text terms over the
    /// columns each filter field searches (a field the view lacks matches
    /// nothing).
    pub(crate) fn push_sql(&self, query: &mut QueryBuilder<Postgres>, pane: Pane) {
        let (_, columns, _) = pane_sql(pane);
        if pane == Pane::Duplicates && !self.lists_replays() {
            query.push(" and v.needs_look");
        }
        for scope in &self.scopes {
            query.push(format!(" and {}", scope.condition(pane).unwrap_or("false")));
        }
        for (field, value) in &self.terms {
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
}

/// `value` as a literal inside an ILIKE pattern.
pub fn escape_like(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct OverdueRow {
    pub op_key: String,
    pub effect_id: i64,
    pub action: String,
    pub target: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub provider: Option<String>,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub dispatched: bool,
    pub deadline_at: Option<DateTime<Utc>>,
    pub overdue_ms: i64,
    pub age_ms: i64,
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct UnknownRow {
    pub op_key: String,
    pub effect_id: i64,
    pub action: String,
    pub target: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub provider: Option<String>,
    pub requested_by: String,
    pub unknown_since: DateTime<Utc>,
    pub unknown_ms: i64,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub reconciliations: i64,
    pub last_finding: Option<String>,
    pub findings: Vec<String>,
    pub attention: Option<String>,
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct DuplicateRow {
    pub op_key: String,
    pub effect_id: i64,
    pub action: String,
    pub target: String,
    pub state: String,
    pub attempts: i64,
    pub replays: i64,
    pub in_flight: i64,
    pub mismatches: i64,
    pub late_results: i64,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    pub requesters: Vec<String>,
    pub has_mismatch: bool,
    pub version: i64,
    /// Writer calls on the key the ledger refused.
    pub refused: i64,
    /// Replays within the hour before the instant, for the burst rule.
    pub replays_last_hour: i64,
    /// Whether a person must look: a mismatch, a late result, a refused
    /// call, a repeat while in flight, or a burst of replays. The rest the
    /// ledger answered by itself.
    pub needs_look: bool,
    /// Why, in the ledger's words (empty when it needs no look).
    pub look_reasons: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct HeldRow {
    pub op_key: String,
    pub effect_id: i64,
    pub target: String,
    pub action: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub requested_by: String,
    pub held_since: DateTime<Utc>,
    pub held_ms: i64,
    pub holder_op_key: String,
    pub holder_effect_id: i64,
    pub holder_state: String,
    pub holder_age_ms: i64,
    pub holder_amount_minor: Option<i64>,
    pub holder_currency: Option<String>,
    pub version: i64,
    /// For bookings: the stretch of time the held one and its holder contend for.
    pub overlap_from: Option<DateTime<Utc>>,
    pub overlap_to: Option<DateTime<Utc>>,
    /// Whether its key was asked for within its pending window:
    /// false, its agent has stopped asking, and released it goes to
    /// Overdue undispatched (the filter `stopped-asking` lists these).
    pub still_asking: bool,
}

/// Rows of one pane; each pane keeps its own shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PaneRows {
    Overdue(Vec<OverdueRow>),
    Unknown(Vec<UnknownRow>),
    Duplicates(Vec<DuplicateRow>),
    Held(Vec<HeldRow>),
}

impl PaneRows {
    pub fn len(&self) -> usize {
        match self {
            PaneRows::Overdue(rows) => rows.len(),
            PaneRows::Unknown(rows) => rows.len(),
            PaneRows::Duplicates(rows) => rows.len(),
            PaneRows::Held(rows) => rows.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each row's key and the version it was read at: what a bulk action
    /// acts on, so that an item changed since is skipped.
    pub fn versions(&self) -> Vec<(String, i64)> {
        match self {
            PaneRows::Overdue(rows) => rows.iter().map(|r| (r.op_key.clone(), r.version)).collect(),
            PaneRows::Unknown(rows) => rows.iter().map(|r| (r.op_key.clone(), r.version)).collect(),
            PaneRows::Duplicates(rows) => {
                rows.iter().map(|r| (r.op_key.clone(), r.version)).collect()
            }
            PaneRows::Held(rows) => rows.iter().map(|r| (r.op_key.clone(), r.version)).collect(),
        }
    }

    /// The held items whose agents have stopped asking for them, with
    /// their versions (none outside the held pane).
    pub fn stopped_asking(&self) -> Vec<(String, i64)> {
        match self {
            PaneRows::Held(rows) => rows
                .iter()
                .filter(|row| !row.still_asking)
                .map(|row| (row.op_key.clone(), row.version))
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn op_keys(&self) -> Vec<&str> {
        match self {
            PaneRows::Overdue(rows) => rows.iter().map(|r| r.op_key.as_str()).collect(),
            PaneRows::Unknown(rows) => rows.iter().map(|r| r.op_key.as_str()).collect(),
            PaneRows::Duplicates(rows) => rows.iter().map(|r| r.op_key.as_str()).collect(),
            PaneRows::Held(rows) => rows.iter().map(|r| r.op_key.as_str()).collect(),
        }
    }
}

/// Reads a window of up to `limit` rows of a pane, most urgent first,
/// starting `offset` rows in: the console pages through a pane this way so
/// memory and poll cost stay bounded however many items are open. At an
/// instant (`effectwatch --at`), the pane as it stood then: the same rules
/// over the ledger as it was (`ledger.*_at`, sql/migrations/0007_panes.sql), ages
/// measured then, and each row's version the one it had then, so an action
/// taken from the past passes only if nothing changed since.
pub async fn fetch<'c>(
    executor: impl PgExecutor<'c>,
    pane: Pane,
    at: Option<DateTime<Utc>>,
    filter: &Filter,
    limit: i64,
    offset: i64,
) -> Result<PaneRows, LedgerError> {
    let (select, _, order) = pane_sql(pane);
    let mut query = QueryBuilder::<Postgres>::new(select);
    push_source(&mut query, pane, at);
    filter.push_sql(&mut query, pane);
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

/// ` from <the pane's view> v where true`, live or as it stood at `at`.
/// Live reads the view itself, whose plan the partial indexes serve.
fn push_source(query: &mut QueryBuilder<Postgres>, pane: Pane, at: Option<DateTime<Utc>>) {
    match at {
        None => {
            query.push(format!(" from {} v where true", pane.view()));
        }
        Some(at) => {
            query.push(format!(" from {}_at(", pane.view()));
            query.push_bind(at);
            query.push(") v where true");
        }
    }
}

type FilterColumns = &'static [(&'static str, Option<&'static str>)];

/// A pane's select list (over its view aliased `v`), the columns each
/// filter field searches, and its order; the functions of an instant
/// return the same columns as the live views.
fn pane_sql(pane: Pane) -> (&'static str, FilterColumns, &'static str) {
    match pane {
        Pane::Overdue => (
            "select v.op_key, v.effect_id, v.action, v.target, v.amount_minor, v.currency, v.provider,
                    v.requested_by, v.created_at, v.dispatched, v.deadline_at,
                    (extract(epoch from v.overdue_by) * 1000)::bigint as overdue_ms,
                    (extract(epoch from v.age) * 1000)::bigint as age_ms, v.version",
            &[
                ("key", Some("v.op_key")),
                ("target", Some("v.target")),
                ("action", Some("v.action")),
                ("provider", Some("v.provider")),
                ("requester", Some("v.requested_by")),
                ("state", Some("'pending'")),
                ("operator", None),
            ],
            " order by v.deadline_at, v.effect_id",
        ),
        Pane::Unknown => (
            "select v.op_key, v.effect_id, v.action, v.target, v.amount_minor, v.currency, v.provider,
                    v.requested_by, v.unknown_since,
                    (extract(epoch from v.unknown_for) * 1000)::bigint as unknown_ms,
                    v.attempts, v.last_error, v.reconciliations, v.last_finding, v.findings,
                    v.attention, v.version",
            &[
                ("key", Some("v.op_key")),
                ("target", Some("v.target")),
                ("action", Some("v.action")),
                ("provider", Some("v.provider")),
                ("requester", Some("v.requested_by")),
                ("state", Some("'unknown'")),
                ("operator", None),
            ],
            " order by v.unknown_since, v.effect_id",
        ),
        Pane::Duplicates => (
            "select v.op_key, v.effect_id, v.action, v.target, v.state, v.attempts, v.replays,
                    v.in_flight, v.mismatches, v.late_results, v.first_seen, v.last_seen,
                    coalesce(v.requesters, '{}') as requesters, v.has_mismatch, v.version,
                    v.refused, v.replays_last_hour, v.needs_look, v.look_reasons",
            &[
                ("key", Some("v.op_key")),
                ("target", Some("v.target")),
                ("action", Some("v.action")),
                ("provider", None),
                ("requester", Some("array_to_string(v.requesters, ' ')")),
                ("state", Some("v.state")),
                ("operator", None),
            ],
            " order by v.needs_look desc, v.has_mismatch desc, v.last_seen desc, v.effect_id",
        ),
        Pane::Held => (
            concat!(
                "select v.op_key, v.effect_id, v.target, v.action, v.amount_minor, v.currency,
                    v.requested_by, v.held_since,
                    (extract(epoch from v.held_for) * 1000)::bigint as held_ms,
                    v.holder_op_key, v.holder_effect_id, v.holder_state,
                    (extract(epoch from v.holder_age) * 1000)::bigint as holder_age_ms,
                    v.holder_amount_minor, v.holder_currency, v.version, v.overlap_from,
                    v.overlap_to, ",
                still_asking!(),
                " as still_asking"
            ),
            &[
                ("key", Some("v.op_key")),
                ("target", Some("v.target")),
                ("action", Some("v.action")),
                ("provider", None),
                ("requester", Some("v.requested_by")),
                ("state", Some("'held'")),
                ("operator", None),
            ],
            " order by v.target, v.held_since, v.effect_id",
        ),
    }
}

/// Items per pane, as `ledger.pane_counts` reports them.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct PaneCount {
    pub pane: String,
    pub items: i64,
    pub oldest_ms: Option<i64>,
}

/// Items per view, now or as they were at `at`.
pub async fn counts<'c>(
    executor: impl PgExecutor<'c>,
    at: Option<DateTime<Utc>>,
) -> Result<Vec<PaneCount>, LedgerError> {
    // Live reads the view, as the panes do.
    let source = match at {
        None => "ledger.pane_counts",
        Some(_) => "ledger.pane_counts_at($1)",
    };
    let query = sqlx::query_as::<_, PaneCount>(sqlx::AssertSqlSafe(format!(
        "select pane, items, (extract(epoch from oldest) * 1000)::bigint as oldest_ms from {source}"
    )));
    let query = match at {
        None => query,
        Some(at) => query.bind(at),
    };
    Ok(query.fetch_all(executor).await?)
}

/// How many keys only replayed the duplicates pane leaves out under
/// `filter`, now or at `at`; None when the filter lists them.
pub async fn replays_not_listed<'c>(
    executor: impl PgExecutor<'c>,
    at: Option<DateTime<Utc>>,
    filter: &Filter,
) -> Result<Option<i64>, LedgerError> {
    if filter.lists_replays() {
        return Ok(None);
    }
    let replays = filter.toggled(Scope::ReplaysOnly);
    Ok(Some(count(executor, Pane::Duplicates, at, &replays).await?))
}

/// How many items of a pane match a filter (all of them when it is
/// empty), now or at `at`.
pub async fn count<'c>(
    executor: impl PgExecutor<'c>,
    pane: Pane,
    at: Option<DateTime<Utc>>,
    filter: &Filter,
) -> Result<i64, LedgerError> {
    let mut query = QueryBuilder::<Postgres>::new("select count(*)");
    push_source(&mut query, pane, at);
    filter.push_sql(&mut query, pane);
    Ok(query.build_query_scalar().fetch_one(executor).await?)
}

/// How long `op_key` has been held when its agent has not asked for it
/// within its pending window (milliseconds); None when it is not
/// held, or is still asked for.
pub async fn held_without_asking<'c>(
    executor: impl PgExecutor<'c>,
    op_key: &str,
) -> Result<Option<i64>, LedgerError> {
    Ok(sqlx::query_scalar(concat!(
        "select (extract(epoch from v.held_for) * 1000)::bigint from ledger.held_conflicts v
          where v.op_key = $1 and not ",
        still_asking!()
    ))
    .bind(op_key)
    .fetch_optional(executor)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pane_marks_one_key_column() {
        for pane in Pane::ALL {
            let keys: Vec<&str> = pane
                .columns()
                .iter()
                .filter(|column| column.key)
                .map(|column| column.title)
                .collect();
            assert_eq!(keys.len(), 1, "{pane}: {keys:?}");
            assert_eq!(pane.columns()[pane.key_column()].title, keys[0], "{pane}");
        }
    }
}
