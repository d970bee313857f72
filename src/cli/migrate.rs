use crate::ledger::LedgerPool;

use super::exit::{Failure, SCHEMA_MISSING};
use crate::ledger::migrate::{self, Standing};

pub async fn run(pool: &LedgerPool) -> Result<(), Failure> {
    let report = migrate::run(pool).await?;
    if report.applied.is_empty() && report.definitions.is_empty() {
        println!(
            "ledger schema is up to date ({} migrations already applied); nothing changed",
            report.already
        );
    } else {
        for migration in &report.applied {
            println!("applied {migration}");
        }
        // A fresh ledger takes every function and view: a count says it;
        // an upgrade's few changed ones are named.
        const NAMED: usize = 8;
        if report.definitions.len() <= NAMED {
            for definition in &report.definitions {
                println!("applied {definition}");
            }
        }
        println!(
            "ledger schema installed: {} migrations applied, {}",
            report.applied.len(),
            crate::format::count_of(
                report.definitions.len(),
                "function or view (re)defined",
                "functions and views (re)defined"
            )
        );
    }
    Ok(())
}

/// A command's failure on a schema it does not find, said as how the
/// ledger's migrations stand against this binary's: `ledger schema 1 is
/// older than this effectwatch's …: run effectwatch migrate` rather than
/// the database's `column v.refused does not exist`. Where this login may
/// not read the migrations, or none is recorded, the database's words stand.
pub async fn explain(pool: &LedgerPool, failure: Failure) -> Failure {
    if failure.code != SCHEMA_MISSING {
        return failure;
    }
    // With no migration recorded, the database's words (which table or
    // column it lacks) say more than "nothing installed".
    match migrate::standing(pool).await {
        Ok(Standing::Missing) | Err(_) => failure,
        Ok(standing) => standing.error().map_or(failure, Failure::from),
    }
}
