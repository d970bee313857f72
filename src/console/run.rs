//! The console's runtime: owns the terminal, the input thread, the poller
//! and the action tasks, and feeds their messages to the pure update.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossterm::event::{
    self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind,
};
use ratatui::DefaultTerminal;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::app::{App, Message, Settings, Task};
use super::notify::{self, Tracker};
use super::poller::{self, PollSettings};
use super::theme::Theme;
use super::{clipboard, views};
use crate::ledger::{ConnectSettings, history};
use crate::settle::{Request, Settled};

/// Carries out a confirmed operator request: its report (the line to show,
/// and what it did to the effect, which the console shows at once), or
/// why it failed, in one line.
pub type SettleRequest = Arc<
    dyn Fn(Request) -> Pin<Box<dyn Future<Output = Result<Settled, String>> + Send>> + Send + Sync,
>;

pub struct ConsoleOptions {
    pub connect: ConnectSettings,
    /// Replay lag above which a console reading a standby calls its data stale.
    pub replica_lag_stale_secs: f64,
    pub theme: Theme,
    pub operator: String,
    pub read_only: bool,
    pub poll_interval: Duration,
    pub notifications: Option<NotificationOptions>,
    /// Mouse wheel scrolls the list; off by default so the terminal's own
    /// selection (copy with the mouse) keeps working.
    pub mouse: bool,
    pub settle_request: SettleRequest,
    /// A line about work running beside the console (the demo's agents).
    pub background_status: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    /// Work the console runs every few seconds while open (escalation delivery).
    pub housekeeping: Option<Housekeeping>,
    /// Time travel: the panes as they were at this instant.
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    /// What the about overlay lists (label, value).
    pub about: Vec<(String, String)>,
    /// The status line's first words, before anything has happened.
    pub welcome: Option<String>,
}

/// One pass of background work; its result, if any, goes to the status line.
pub type Housekeeping =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Option<String>> + Send>> + Send + Sync>;

#[derive(Debug, Clone)]
pub struct NotificationOptions {
    pub min_interval: Duration,
    pub timeout: Duration,
    /// A file that says the operator was already told notifications do not
    /// work here: later consoles log it instead of saying it again. It goes
    /// when a notification gets through.
    pub unavailable_said: PathBuf,
}

/// Runs until the operator quits. The terminal is restored on every exit
/// path, and by ratatui's panic hook on a panic.
pub async fn run(options: ConsoleOptions) -> std::io::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let mouse = options.mouse;
    if mouse
        && let Err(error) =
            crossterm::execute!(std::io::stdout(), crossterm::event::EnableMouseCapture)
    {
        let _ = ratatui::try_restore();
        return Err(error);
    }
    let result = event_loop(&mut terminal, options).await;
    if mouse {
        let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableMouseCapture);
    }
    ratatui::try_restore()?;
    result
}

/// How long quitting waits for confirmed actions still under way; they are
/// bounded by the providers' timeouts.
const FINISH_ACTIONS: Duration = Duration::from_secs(10);

/// What runs beside the event loop, stopped on every way out of it (a
/// failed draw's `?` included) when this is dropped.
struct Running {
    messages: mpsc::Receiver<Message>,
    stop: Arc<AtomicBool>,
    input: Option<std::thread::JoinHandle<()>>,
    /// The poller, the ticker and housekeeping.
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in &self.tasks {
            task.abort();
        }
        // Closed first: an input thread blocked on a full channel would
        // otherwise never see the stop flag, and the join would hang.
        self.messages.close();
        // Joined so that nothing reads the terminal once it is restored; the
        // thread notices within one 100 ms poll.
        if let Some(input) = self.input.take() {
            let _ = input.join();
        }
    }
}

async fn event_loop(
    terminal: &mut DefaultTerminal,
    mut options: ConsoleOptions,
) -> std::io::Result<()> {
    let (sender, messages) = mpsc::channel::<Message>(256);
    let stop = Arc::new(AtomicBool::new(false));
    let mut running = Running {
        messages,
        stop: stop.clone(),
        input: Some(spawn_input_thread(sender.clone(), stop)),
        tasks: Vec::new(),
    };
    let mut app = App::new(Settings {
        at: options.at,
        theme: options.theme.name.clone(),
        replica_lag_stale_secs: options.replica_lag_stale_secs,
        server: Some(options.connect.server()),
        about: options.about.clone(),
        welcome: options.welcome.clone(),
        ..Settings::new(
            options.operator.clone(),
            options.read_only,
            options.poll_interval,
        )
    });
    let (settings_sender, settings) = watch::channel(poll_settings(&app));
    running.tasks.push(poller::spawn(
        options.connect.clone(),
        settings,
        sender.clone(),
    ));
    running.tasks.push({
        let sender = sender.clone();
        let background = options.background_status.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_secs(1));
            loop {
                interval.tick().await;
                let tick = match &background {
                    Some(line) => Message::Background(line()),
                    None => Message::Tick,
                };
                if sender.send(tick).await.is_err() {
                    return;
                }
            }
        })
    });
    let unavailable_said = options
        .notifications
        .as_ref()
        .map(|n| n.unavailable_said.clone())
        .unwrap_or_default();
    let mut tracker = options
        .notifications
        .map(|n| (Tracker::new(n.min_interval), n.timeout));
    let notifications_failed = Arc::new(AtomicBool::new(false));
    let mut detail_pool = None;
    let mut actions: Vec<JoinHandle<()>> = Vec::new();
    if let Some(work) = options.housekeeping.clone() {
        let sender = sender.clone();
        running.tasks.push(tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_secs(3));
            loop {
                interval.tick().await;
                if let Some(line) = work().await
                    && sender.send(Message::Notice(line)).await.is_err()
                {
                    return;
                }
            }
        }));
    }

    loop {
        let size = terminal.size()?;
        app.page_size = size.height.saturating_sub(7).max(1) as usize;
        terminal.draw(|frame| views::draw(frame, &app, &options.theme))?;
        let Some(message) = running.messages.recv().await else {
            break;
        };
        if let (Message::Snapshot(snapshot), Some((tracker, timeout))) = (&message, &mut tracker)
            && !notifications_failed.load(Ordering::Relaxed)
        {
            for batch in tracker.observe(&snapshot.panes, Instant::now()) {
                let (sender, failed, timeout) =
                    (sender.clone(), notifications_failed.clone(), *timeout);
                let said = unavailable_said.clone();
                tokio::spawn(async move {
                    let title = format!("effectwatch: {}", batch.pane.title());
                    match notify::send(title, batch.summary(), timeout).await {
                        Ok(()) => {
                            let _ = std::fs::remove_file(&said);
                        }
                        Err(error) if !failed.swap(true, Ordering::Relaxed) => {
                            tracing::warn!(%error, "desktop notifications unavailable");
                            if said.exists() {
                                return;
                            }
                            let _ = std::fs::write(&said, &error);
                            let notice = format!(
                                "desktop notifications unavailable ({error}); carrying on without them (said once; --no-notify turns them off)"
                            );
                            let _ = sender.send(Message::Notice(notice)).await;
                        }
                        Err(_) => {}
                    }
                });
            }
        }
        for command in app.update(message) {
            match command {
                Task::Quit => {
                    actions.retain(|task| !task.is_finished());
                    if !actions.is_empty() {
                        app.set_status(
                            format!("finishing {} action(s)…", actions.len()),
                            super::theme::Role::Muted,
                        );
                        terminal.draw(|frame| views::draw(frame, &app, &options.theme))?;
                        finish(actions, &mut running.messages).await;
                    }
                    return Ok(());
                }
                // A changed setting wakes the poller at once, NOTIFY's gap aside.
                Task::Repoll => {
                    let _ = settings_sender.send(poll_settings(&app));
                }
                Task::SwitchTheme(name) => {
                    if let Some(theme) = super::theme::Theme::built_in(name) {
                        options.theme = theme;
                    }
                }
                Task::LoadDetail(op_key) => {
                    if detail_pool.is_none() {
                        let mut connect = options.connect.clone();
                        connect.max_connections = 2;
                        detail_pool = crate::ledger::connect_lazy(&connect).ok();
                    }
                    if let Some(pool) = detail_pool.clone() {
                        let sender = sender.clone();
                        tokio::spawn(async move {
                            let result = history::load(&pool, &op_key)
                                .await
                                .map(Box::new)
                                .map_err(|e| e.to_string());
                            let _ = sender.send(Message::Detail(op_key, result)).await;
                        });
                    }
                }
                Task::Settle(request) => {
                    let (sender, settle_request) = (sender.clone(), options.settle_request.clone());
                    actions.retain(|task| !task.is_finished());
                    actions.push(tokio::spawn(async move {
                        let result = settle_request(request.clone()).await;
                        let _ = sender.send(Message::Settled { request, result }).await;
                    }));
                }
                Task::Copy(text) => {
                    if let Err(error) = clipboard::copy(&text) {
                        app.set_status(
                            format!("copy failed: {error}"),
                            super::theme::Role::Critical,
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// Waits up to [`FINISH_ACTIONS`] for the actions still under way, reading
/// (and dropping) messages meanwhile so none of them waits on a full channel.
async fn finish(actions: Vec<JoinHandle<()>>, messages: &mut mpsc::Receiver<Message>) {
    let all = async {
        for task in actions {
            let _ = task.await;
        }
    };
    let drain = async { while messages.recv().await.is_some() {} };
    let _ = tokio::time::timeout(FINISH_ACTIONS, async {
        tokio::select! {
            _ = all => {}
            _ = drain => {}
        }
    })
    .await;
}

/// What the poller reads, as the console's state asks for it.
pub fn poll_settings(app: &App) -> PollSettings {
    PollSettings {
        filter: app.filter.clone(),
        interval: app.poll_interval,
        paused: app.paused,
        offsets: app.offsets,
        at: app.at,
        settled_actions: app.settled_actions,
    }
}

/// crossterm's read blocks, so it gets a thread of its own; it checks the
/// stop flag between short polls so quitting never waits on a key press.
fn spawn_input_thread(
    sender: mpsc::Sender<Message>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match event::poll(Duration::from_millis(100)) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => return,
            }
            let message = match event::read() {
                Ok(Event::Key(key)) if key.kind != KeyEventKind::Release => Message::Key(key),
                Ok(Event::Resize(..)) => Message::Tick,
                Ok(Event::Mouse(mouse)) => match mouse.kind {
                    MouseEventKind::ScrollUp => {
                        Message::Key(KeyEvent::new(KeyCode::Up, KeyModifiers::NONE))
                    }
                    MouseEventKind::ScrollDown => {
                        Message::Key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE))
                    }
                    _ => continue,
                },
                Ok(_) => continue,
                Err(_) => return,
            };
            if sender.blocking_send(message).is_err() {
                return;
            }
        }
    })
}
