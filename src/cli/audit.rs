use sqlx::PgPool;

use super::Format;
use super::exit::{FAILURE, Failure};
use crate::ledger::audit;
use crate::text::{safe_json, sanitize_line};

pub async fn verify(pool: &PgPool, format: Format) -> Result<(), Failure> {
    let report = audit::verify(pool).await?;
    match format {
        Format::Json => println!("{}", safe_json(&report)),
        Format::Table if report.is_intact() => {
            println!("audit chain intact: {} entries verified", report.checked)
        }
        Format::Table => {}
    }
    match report.first_broken_seq {
        None => Ok(()),
        Some(seq) => Err(Failure::new(
            FAILURE,
            format!(
                "audit chain BROKEN at entry {seq} ({} entries before it verified): {}",
                report.checked,
                sanitize_line(report.problem.as_deref().unwrap_or("unknown problem"))
            ),
        )),
    }
}
