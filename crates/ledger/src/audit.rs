//! The audit chain: verification and reading.

use std::path::Path;

use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use super::LedgerError;
use super::model::AuditEntry;

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ChainReport {
    pub checked: i64,
    pub first_broken_seq: Option<i64>,
    pub problem: Option<String>,
    /// The checkpoint the walk started from, when months of the chain were
    /// dropped; None: the chain is whole from its first entry.
    pub checkpoint_seq: Option<i64>,
}

impl ChainReport {
    pub fn is_intact(&self) -> bool {
        self.first_broken_seq.is_none()
    }
}

pub async fn verify<'c>(executor: impl PgExecutor<'c>) -> Result<ChainReport, LedgerError> {
    Ok(sqlx::query_as::<_, ChainReport>(
        "select checked, first_broken_seq, problem, checkpoint_seq from ledger.verify_audit_chain()",
    )
    .fetch_one(executor)
    .await?)
}

/// An entry of the chain by its place and hash, kept outside the ledger
/// (a ticket, a log): `effectwatch audit anchor` prints the head as one,
/// and `audit verify --expect` checks the chain still holds it. Written
/// `SEQ:HASH`; a bare hash names whichever entry has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Anchor {
    pub seq: Option<i64>,
    pub hash: String,
}

impl std::str::FromStr for Anchor {
    type Err = String;

    fn from_str(text: &str) -> Result<Anchor, String> {
        let text = text.trim();
        let (seq, hash) = match text.split_once(':') {
            Some((seq, hash)) => {
                let seq = seq.parse::<i64>().ok().filter(|seq| *seq >= 0).ok_or_else(|| {
                    format!("{seq:?} is not an entry number: an anchor is SEQ:HASH, as `audit anchor` prints it")
                })?;
                (Some(seq), hash)
            }
            None => (None, text),
        };
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(
                "an anchor's hash is 64 hexadecimal digits (SEQ:HASH, as `audit anchor` prints it)"
                    .to_string(),
            );
        }
        Ok(Anchor {
            seq,
            hash: hash.to_ascii_lowercase(),
        })
    }
}

impl std::fmt::Display for Anchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.seq {
            Some(seq) => write!(f, "{seq}:{}", self.hash),
            None => f.write_str(&self.hash),
        }
    }
}

/// The head of the chain as an anchor: the newest entry's place and hash.
pub async fn head<'c>(executor: impl PgExecutor<'c>) -> Result<Anchor, LedgerError> {
    let (seq, hash): (i64, String) = sqlx::query_as("select seq, hash from ledger.audit_head")
        .fetch_one(executor)
        .await?;
    Ok(Anchor {
        seq: Some(seq),
        hash,
    })
}

/// What the chain says of an anchor taken earlier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum AnchorVerdict {
    /// The entry is in the chain with the hash kept: nothing up to it was
    /// rewritten or removed.
    Holds { seq: i64 },
    /// The entry has another hash now: it, or an entry before it, was rewritten.
    Rewritten { seq: i64, hash: String },
    /// No entry has that place (or that hash): the chain was cut back or rewritten.
    Missing { head_seq: i64 },
    /// Retention dropped it with the months before a checkpoint: it can no
    /// longer be checked; anchor again.
    Dropped { checkpoint_seq: i64 },
}

/// Looks for the anchored entry in the chain as it is now. Meant beside
/// `verify`, in its transaction: an intact chain that still holds the
/// anchored entry was not rewritten up to it.
pub async fn check_anchor(
    tx: &mut super::LedgerTransaction<'_>,
    anchor: &Anchor,
) -> Result<AnchorVerdict, LedgerError> {
    // The head of an empty chain, which every chain starts from.
    if anchor.seq.is_none_or(|seq| seq == 0) && anchor.hash.bytes().all(|b| b == b'0') {
        return Ok(AnchorVerdict::Holds { seq: 0 });
    }
    let found: Vec<(i64, String)> = sqlx::query_as(
        "select a.seq, a.hash from ledger.audit_log a
          where ($1::bigint is not null and a.seq = $1) or ($1 is null and a.hash = $2)
         union all
         select c.seq, c.hash from ledger.audit_checkpoints c
          where ($1::bigint is not null and c.seq = $1) or ($1 is null and c.hash = $2)",
    )
    .bind(anchor.seq)
    .bind(&anchor.hash)
    .fetch_all(&mut *tx)
    .await?;
    if let Some((seq, _)) = found.first()
        && found.iter().all(|(_, hash)| *hash == anchor.hash)
    {
        return Ok(AnchorVerdict::Holds { seq: *seq });
    }
    if let Some((seq, hash)) = found.into_iter().find(|(_, hash)| *hash != anchor.hash) {
        return Ok(AnchorVerdict::Rewritten { seq, hash });
    }
    let newest_checkpoint: Option<i64> =
        sqlx::query_scalar("select max(seq) from ledger.audit_checkpoints")
            .fetch_one(&mut *tx)
            .await?;
    match (anchor.seq, newest_checkpoint) {
        (Some(seq), Some(checkpoint_seq)) if seq < checkpoint_seq => {
            Ok(AnchorVerdict::Dropped { checkpoint_seq })
        }
        _ => Ok(AnchorVerdict::Missing {
            head_seq: head(&mut *tx).await?.seq.unwrap_or(0),
        }),
    }
}

/// Which entries `audit list` reads; every part narrows, None: any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// The name written in the trail (exact).
    pub operator: Option<String>,
    /// The effect's key (exact).
    pub op_key: Option<String>,
    pub limit: i64,
}

/// Entries in the order they were made (oldest first), each with its
/// effect's target, within the query; read by the audit log's time index.
pub async fn list<'c>(
    executor: impl PgExecutor<'c>,
    query: &AuditQuery,
) -> Result<Vec<AuditEntry>, LedgerError> {
    Ok(sqlx::query_as::<_, AuditEntry>(
        "select a.seq, a.at, a.operator, a.db_role, a.action, a.effect_id, a.op_key, a.reason,
                a.before, a.after, a.hash, e.target
           from ledger.audit_log a
           left join ledger.effects e on e.id = a.effect_id
          where ($1::timestamptz is null or a.at >= $1)
            and ($2::timestamptz is null or a.at < $2)
            and ($3::text is null or a.operator = $3)
            and ($4::text is null or a.op_key = $4)
          order by a.seq
          limit $5",
    )
    .bind(query.since)
    .bind(query.until)
    .bind(query.operator.as_deref())
    .bind(query.op_key.as_deref())
    .bind(query.limit)
    .fetch_all(executor)
    .await?)
}

/// The newest entries made up to `at` (None: now) first, up to `limit`.
pub async fn recent<'c>(
    executor: impl PgExecutor<'c>,
    at: Option<chrono::DateTime<chrono::Utc>>,
    limit: i64,
) -> Result<Vec<AuditEntry>, LedgerError> {
    Ok(sqlx::query_as::<_, AuditEntry>(
        "select a.seq, a.at, a.operator, a.db_role, a.action, a.effect_id, a.op_key, a.reason,
                a.before, a.after, a.hash, e.target
           from ledger.audit_log_at($1) a
           left join ledger.effects e on e.id = a.effect_id
          order by a.seq desc limit $2",
    )
    .bind(at)
    .bind(limit)
    .fetch_all(executor)
    .await?)
}

/// A checkpoint of the chain made when retention dropped months of it
/// (sql/migrations/0003_audit.sql): the head it vouches for and its signature.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Checkpoint {
    pub seq: i64,
    pub hash: String,
    /// History before this instant was dropped.
    pub through: DateTime<Utc>,
    pub kept_entries: i64,
    pub message: String,
    pub signature: String,
    pub public_key: String,
    pub made_by: String,
    pub made_at: DateTime<Utc>,
}

/// The newest checkpoint, if months of the chain were ever dropped.
pub async fn newest_checkpoint<'c>(
    executor: impl PgExecutor<'c>,
) -> Result<Option<Checkpoint>, LedgerError> {
    Ok(sqlx::query_as::<_, Checkpoint>(
        "select seq, hash, through, kept_entries, message, signature, public_key, made_by, made_at
           from ledger.audit_checkpoints order by seq desc limit 1",
    )
    .fetch_optional(executor)
    .await?)
}

/// What a checkpoint's signature proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SignatureVerdict {
    /// Signed by a key the config trusts.
    Trusted,
    /// A good signature by a key the config does not list: anyone who can
    /// write to the ledger could have made it.
    UntrustedKey,
    /// A good signature, and no trusted key configured to compare with:
    /// as unproven as an untrusted key.
    KeyNotChecked,
    /// The signature does not verify: the checkpoint was altered or forged.
    Invalid,
}

impl SignatureVerdict {
    pub fn is_acceptable(self) -> bool {
        self == SignatureVerdict::Trusted
    }
}

/// Checks a checkpoint's signature over its message, and its key against
/// `trusted` (base64 public keys).
pub fn judge_signature(checkpoint: &Checkpoint, trusted: &[String]) -> SignatureVerdict {
    let (Ok(key), Ok(signature)) = (
        BASE64.decode(checkpoint.public_key.trim()),
        BASE64.decode(checkpoint.signature.trim()),
    ) else {
        return SignatureVerdict::Invalid;
    };
    if UnparsedPublicKey::new(&ED25519, &key)
        .verify(checkpoint.message.as_bytes(), &signature)
        .is_err()
    {
        return SignatureVerdict::Invalid;
    }
    if trusted.is_empty() {
        return SignatureVerdict::KeyNotChecked;
    }
    let trusted_bytes = trusted.iter().filter_map(|k| BASE64.decode(k.trim()).ok());
    if trusted_bytes.into_iter().any(|t| t == key) {
        SignatureVerdict::Trusted
    } else {
        SignatureVerdict::UntrustedKey
    }
}

/// The Ed25519 key that signs checkpoints. It lives in a file the
/// database never sees (base64 of its PKCS#8 form, one line), so whoever
/// can write to the ledger still cannot forge a checkpoint.
pub struct CheckpointSigner {
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for CheckpointSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CheckpointSigner({})", self.public_key())
    }
}

impl CheckpointSigner {
    /// Makes a new key in a new file readable by its owner alone (an
    /// existing file is never replaced) and returns the signer.
    pub fn generate(path: &Path) -> Result<CheckpointSigner, String> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let document = Ed25519KeyPair::generate_pkcs8(&rng)
            .map_err(|_| "cannot generate a key".to_string())?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        file.write_all(format!("{}\n", BASE64.encode(document.as_ref())).as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
        Self::load(path)
    }

    pub fn load(path: &Path) -> Result<CheckpointSigner, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read the signing key {}: {error}", path.display()))?;
        let der = BASE64
            .decode(text.trim())
            .map_err(|_| format!("{} is not a signing key (base64 expected)", path.display()))?;
        let pair = Ed25519KeyPair::from_pkcs8(&der)
            .map_err(|_| format!("{} is not an Ed25519 signing key", path.display()))?;
        Ok(CheckpointSigner { pair })
    }

    /// Base64 of the raw public key: what `[audit] trusted_keys` lists.
    pub fn public_key(&self) -> String {
        BASE64.encode(self.pair.public_key().as_ref())
    }

    pub fn sign(&self, message: &str) -> String {
        BASE64.encode(self.pair.sign(message.as_bytes()).as_ref())
    }
}

/// Whether text is a public key `judge_signature` can compare with.
pub fn is_public_key(text: &str) -> bool {
    BASE64
        .decode(text.trim())
        .is_ok_and(|bytes| bytes.len() == aws_lc_rs::signature::ED25519_PUBLIC_KEY_LEN)
}
