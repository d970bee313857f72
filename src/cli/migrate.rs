use crate::ledger::LedgerPool;

use super::exit::Failure;
use crate::ledger::migrate;

pub async fn run(pool: &LedgerPool) -> Result<(), Failure> {
    let report = migrate::run(pool).await?;
    if report.applied.is_empty() {
        println!(
            "ledger schema is up to date ({} migrations already applied); nothing changed",
            report.already
        );
    } else {
        for migration in &report.applied {
            println!("applied {migration}");
        }
        println!(
            "ledger schema installed: {} migrations applied",
            report.applied.len()
        );
    }
    Ok(())
}
