use std::process::ExitCode;

use effectwatch::cli::exit::{BAD_CONFIG, Failure, USAGE};
use effectwatch::cli::{self, AuditCommand, Cli, Command, ConsoleFlags, LedgerCommand};
use effectwatch::config::{Config, ConfigSource};
use effectwatch::ledger;

fn main() -> ExitCode {
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    // The demo must never use a database only because DATABASE_URL is set.
    let explicit_url =
        matches.value_source("database_url") == Some(clap::parser::ValueSource::CommandLine);
    let explicit_operator =
        matches.value_source("operator") == Some(clap::parser::ValueSource::CommandLine);
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let runtime = match runtime_for(&cli) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("effectwatch: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, explicit_url, explicit_operator)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            // One line, whatever the message quotes: a 100 kB key is cut in the middle.
            if !failure.message.is_empty() {
                eprintln!(
                    "effectwatch: {}",
                    effectwatch::text::message_line(&failure.message)
                );
            }
            failure.exit_code()
        }
    }
}

/// One worker thread for a gateway over stdio: with a second, each call is
/// handed between the cores it shares with the agent, the tool server and
/// PostgreSQL, and that cost more than it gave (0.06 to 0.2 ms of the 1.2 ms
/// a recorded call adds, on two cores). Everything else gets every core.
fn runtime_for(cli: &Cli) -> std::io::Result<tokio::runtime::Runtime> {
    if cli.serves_one_agent_over_stdio() {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    }
}

async fn run(cli: Cli, explicit_url: bool, explicit_operator: bool) -> Result<(), Failure> {
    // Generated from the command line alone: a broken config must not stop
    // a package build from writing its completions and manual page.
    match cli.command {
        Some(Command::Completions { shell }) => {
            end_quietly_when_the_reader_goes();
            return cli::shell::completions(shell);
        }
        Some(Command::Man { dir }) => {
            end_quietly_when_the_reader_goes();
            return cli::shell::man(dir);
        }
        _ => {}
    }
    // A version must print whatever the config holds.
    if cli.version {
        let config = Config::load(cli.config.as_deref(), theme_problem)
            .map(|(config, _)| config)
            .unwrap_or_default();
        let url = cli.database_url.clone().or(config.database_url.clone());
        return cli::version::run(url, &config).await;
    }
    let (mut config, source) = load_config(&cli)?;
    let demo_url = cli.database_url.clone().filter(|_| explicit_url);
    let (command, at) = with_console_flags(cli.command, cli.console, demo_url)?;
    // Time travel shows the past: nothing may be acted on from it.
    config.read_only |= cli.read_only || at.is_some();
    if !matches!(command, Command::Watch(_) | Command::Demo(_)) {
        end_quietly_when_the_reader_goes();
    }
    refuse_the_future(at)?;
    let configured_url = cli
        .database_url
        .clone()
        .or_else(|| config.database_url.clone());
    let command = match command {
        Command::Demo(args) => return cli::demo::run(&config, args).await,
        Command::McpTools(args) => return cli::gateway::run_tools(args).await,
        Command::Config => {
            return cli::config::run(&config, &source, cli.database_url.as_deref()).await;
        }
        // Every failure of a check, a missing URL included, is "cannot tell".
        Command::Check(args) => return cli::check::run(configured_url, args).await,
        // Also answered above, before the config is read.
        Command::Completions { shell } => return cli::shell::completions(shell),
        Command::Man { dir } => return cli::shell::man(dir),
        Command::Watch(flags) => {
            let url = required(configured_url)?;
            return run_console(&config, flags, url, at).await;
        }
        Command::Ledger(command) => command,
    };
    let on_ledger = OnLedger {
        config: &config,
        at,
        // Whose entries `audit list` lists: only a name given here, never
        // the config's own operator, which would hide everyone else's.
        audit_operator: cli.operator.clone().filter(|_| explicit_operator),
    };
    run_on_ledger(on_ledger, command, configured_url).await
}

/// Why the theme a config names would not load.
fn theme_problem(name: &str) -> Option<String> {
    effectwatch::console::theme::Theme::load(name).err()
}

/// Loads the config with the command line's operator and replica applied.
/// Every provider and sink is checked now: no command runs on a config
/// that would fail later, when a provider or sink is first used.
fn load_config(cli: &Cli) -> Result<(Config, ConfigSource), Failure> {
    let (mut config, source) =
        Config::load(cli.config.as_deref(), theme_problem).map_err(|error| {
            if let Some(Command::Config) = cli.command {
                cli::config::print_problems(&error);
            }
            Failure::new(BAD_CONFIG, error.to_string())
        })?;
    if let Some(operator) = &cli.operator {
        config.operator = operator.clone();
    }
    if let Some(read_url) = &cli.read_url {
        config.read_url = Some(read_url.clone());
    }
    Ok((config, source))
}

fn refuse_the_future(at: Option<chrono::DateTime<chrono::Utc>>) -> Result<(), Failure> {
    if let Some(at) = at
        && at > chrono::Utc::now()
    {
        return Err(Failure::new(
            USAGE,
            format!(
                "--at {} is in the future: the ledger has no record of it yet",
                at.to_rfc3339()
            ),
        ));
    }
    Ok(())
}

/// What a ledger command runs with besides its own arguments.
struct OnLedger<'a> {
    config: &'a Config,
    at: Option<chrono::DateTime<chrono::Utc>>,
    audit_operator: Option<String>,
}

/// A ledger command, on a pool of its own; a failure is explained by the
/// ledger's migration state unless it was the migration that failed.
async fn run_on_ledger(
    on: OnLedger<'_>,
    command: LedgerCommand,
    configured_url: Option<String>,
) -> Result<(), Failure> {
    // Keygen writes a file of its own: no ledger, no URL.
    if let LedgerCommand::Audit {
        command: AuditCommand::Keygen { out },
    } = &command
    {
        return cli::audit::keygen(out);
    }
    let url = required(configured_url)?;
    let read_url = on.config.read_url.clone();
    // What only reads goes to the replica when there is one; nothing that
    // writes ever does.
    let url = match read_url {
        Some(read_url) if command.only_reads() => read_url,
        _ => url,
    };
    let pool = ledger::connect(&on.config.connect_settings(url, command.name())).await?;
    let migrating = matches!(command, LedgerCommand::Migrate);
    let ran = dispatch_ledger(&pool, on, command).await;
    match ran {
        Err(failure) if !migrating => Err(cli::migrate::explain(&pool, failure).await),
        ran => ran,
    }
}

async fn dispatch_ledger(
    pool: &ledger::LedgerPool,
    on: OnLedger<'_>,
    command: LedgerCommand,
) -> Result<(), Failure> {
    let config = on.config;
    match command {
        LedgerCommand::Migrate => cli::migrate::run(pool).await,
        LedgerCommand::List {
            pane,
            format,
            limit,
            filter,
            ..
        } => cli::list::run(pool, on.at, pane, format, limit, filter.as_deref()).await,
        LedgerCommand::Show { op_key, format } => cli::show::run(pool, &op_key, format).await,
        LedgerCommand::Audit { command } => match command {
            AuditCommand::Verify { format, expect } => {
                cli::audit::verify(pool, config, format, expect.as_ref()).await
            }
            AuditCommand::Anchor { format } => cli::audit::anchor(pool, format).await,
            AuditCommand::List(mut args) => {
                args.operator = on.audit_operator;
                cli::audit::list(pool, args).await
            }
            AuditCommand::Keygen { out } => cli::audit::keygen(&out),
        },
        LedgerCommand::Finance(args) => cli::finance::run(pool, args).await,
        LedgerCommand::Report(args) => cli::report::run(pool, args).await,
        LedgerCommand::Gateway(args) => cli::gateway::run(pool.clone(), args).await,
        LedgerCommand::Prune(args) => cli::prune::run(pool, config, args).await,
        LedgerCommand::Policy { command } => cli::policy::run(pool, config, command).await,
        LedgerCommand::Approval { command } => cli::approval::run(pool, config, command).await,
        LedgerCommand::Settle(command) => cli::settle::run(pool, config, command).await,
    }
}

fn required(url: Option<String>) -> Result<String, Failure> {
    url.ok_or_else(|| {
        Failure::new(
            BAD_CONFIG,
            "no database given: pass --database-url, set DATABASE_URL, or set database_url in the config file",
        )
    })
}

/// The live console on the configured ledger, its reads on the replica
/// when there is one.
async fn run_console(
    config: &Config,
    flags: ConsoleFlags,
    url: String,
    at: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<(), Failure> {
    let operator = cli::watch::OperatorWiring::for_console(config, &url)?;
    let args = cli::watch::WatchArgs {
        database_url: url,
        read_url: config.read_url.clone(),
        theme: flags.theme,
        poll_interval: flags.poll_interval,
        no_notify: flags.no_notify,
        operator,
        background_status: None,
        about: Vec::new(),
        welcome: None,
        at,
    };
    cli::watch::run(config, args).await
}

/// The subcommand with the console's flags given before it (`effectwatch
/// --theme light watch`) folded in where it takes them, and the instant of
/// time travel; `--at` before a subcommand that reads no instant is refused.
fn with_console_flags(
    command: Option<Command>,
    outer: ConsoleFlags,
    demo_url: Option<String>,
) -> Result<(Command, Option<chrono::DateTime<chrono::Utc>>), Failure> {
    let command = match command.unwrap_or(Command::Watch(ConsoleFlags::default())) {
        Command::Watch(flags) => Command::Watch(flags.or(outer.clone())),
        Command::Ledger(LedgerCommand::List {
            pane,
            format,
            limit,
            filter,
            time_travel,
        }) => Command::Ledger(LedgerCommand::List {
            pane,
            format,
            limit,
            filter,
            time_travel: time_travel.or(outer.time_travel),
        }),
        Command::Ledger(LedgerCommand::Finance(mut args)) => {
            args.time_travel = args.time_travel.or(outer.time_travel);
            Command::Ledger(LedgerCommand::Finance(args))
        }
        Command::Demo(mut args) => {
            args.database_url = demo_url;
            args.theme = args.theme.or(outer.theme.clone());
            args.no_notify |= outer.no_notify;
            Command::Demo(args)
        }
        other => {
            if outer.time_travel.at.is_some() {
                return Err(Failure::new(
                    USAGE,
                    "--at is for the console, `list` and `finance` (time travel); for a past range use `effectwatch report --since … --until …`",
                ));
            }
            other
        }
    };
    let at = match &command {
        Command::Watch(flags) => flags.time_travel.at,
        Command::Ledger(LedgerCommand::List { time_travel, .. }) => time_travel.at,
        Command::Ledger(LedgerCommand::Finance(args)) => args.time_travel.at,
        _ => None,
    };
    Ok((command, at))
}

/// `effectwatch finance | head` must end as other Unix tools do when the
/// reader closes the pipe: quietly, not with a "Broken pipe" panic from
/// println!. Rust ignores SIGPIPE by default; a command that prints and
/// exits gets the default back (the console keeps it ignored: its sockets
/// never raise it anyway, std sends with MSG_NOSIGNAL).
fn end_quietly_when_the_reader_goes() {
    #[cfg(unix)]
    {
        use nix::sys::signal::{SigHandler, Signal, signal};
        // SAFETY: installs the default disposition before any other thread
        // writes to a pipe; no handler code runs in this process.
        let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
    }
}
