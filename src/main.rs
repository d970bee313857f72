use std::process::ExitCode;

use clap::Parser;

use effectwatch::cli::exit::{BAD_CONFIG, Failure};
use effectwatch::cli::{self, AuditCommand, Cli, Command};
use effectwatch::ledger::{self, ConnectSettings};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("effectwatch: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("effectwatch: {}", failure.message);
            failure.exit_code()
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let Some(command) = cli.command else {
        let mut help = <Cli as clap::CommandFactory>::command();
        help.print_help().ok();
        return Ok(());
    };
    let url = cli.database_url.ok_or_else(|| {
        Failure::new(
            BAD_CONFIG,
            "no database given: pass --database-url or set DATABASE_URL",
        )
    })?;
    let pool = ledger::connect(&ConnectSettings::new(url)).await?;
    match command {
        Command::Migrate => cli::migrate::run(&pool).await,
        Command::List {
            pane,
            format,
            limit,
            filter,
        } => cli::list::run(&pool, pane, format, limit, filter.as_deref()).await,
        Command::Show { op_key, format } => cli::show::run(&pool, &op_key, format).await,
        Command::Audit {
            command: AuditCommand::Verify { format },
        } => cli::audit::verify(&pool, format).await,
    }
}
