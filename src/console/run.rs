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

use super::app::{App, Message, Settings, Snapshot, Task};
use super::notify::{self, NewItems, Tracker};
use super::poller::{self, PollSettings};
use super::theme::Theme;
use super::{clipboard, views};
use crate::ledger::{ConnectSettings, LedgerPool, history};
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
    let mut app = new_app(&options);
    let (settings_sender, settings) = watch::channel(app.poll_settings());
    running.tasks.push(poller::spawn(
        options.connect.clone(),
        settings,
        sender.clone(),
    ));
    running.tasks.push(spawn_ticker(
        sender.clone(),
        options.background_status.clone(),
    ));
    let mut notifier = options.notifications.take().map(Notifier::new);
    if let Some(work) = options.housekeeping.clone() {
        running.tasks.push(spawn_housekeeping(sender.clone(), work));
    }
    let mut worker = Worker {
        sender,
        settings: settings_sender,
        connect: options.connect.clone(),
        settle_request: options.settle_request.clone(),
        detail_pool: None,
        actions: Vec::new(),
    };
    loop {
        app.fit_to_height(terminal.size()?.height);
        terminal.draw(|frame| views::draw(frame, &app, &options.theme))?;
        let Some(message) = running.messages.recv().await else {
            break;
        };
        if let (Message::Snapshot(snapshot), Some(notifier)) = (&message, &mut notifier) {
            notifier.observe(snapshot, &worker.sender);
        }
        for task in app.update(message) {
            if task == Task::Quit {
                let actions = std::mem::take(&mut worker.actions);
                let theme = &options.theme;
                return quit(terminal, &mut app, theme, actions, &mut running.messages).await;
            }
            worker.carry_out(task, &mut app, &mut options.theme);
        }
    }
    Ok(())
}

/// The console's state as the runtime's options start it.
fn new_app(options: &ConsoleOptions) -> App {
    App::new(Settings {
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
    })
}

/// The clock's tick, every second, with the line about work running
/// beside the console when there is some.
fn spawn_ticker(
    sender: mpsc::Sender<Message>,
    background: Option<Arc<dyn Fn() -> String + Send + Sync>>,
) -> JoinHandle<()> {
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
}

/// Housekeeping every three seconds; what it says goes to the status line.
fn spawn_housekeeping(sender: mpsc::Sender<Message>, work: Housekeeping) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_secs(3));
        loop {
            interval.tick().await;
            if let Some(line) = work().await
                && sender.send(Message::Notice(line)).await.is_err()
            {
                return;
            }
        }
    })
}

/// Desktop notifications of new items, until one fails: then the operator
/// is told once (and, through `unavailable_said`, not again by later
/// consoles), and no more are tried.
struct Notifier {
    tracker: Tracker,
    timeout: Duration,
    failed: Arc<AtomicBool>,
    unavailable_said: PathBuf,
}

impl Notifier {
    fn new(options: NotificationOptions) -> Notifier {
        Notifier {
            tracker: Tracker::new(options.min_interval),
            timeout: options.timeout,
            failed: Arc::new(AtomicBool::new(false)),
            unavailable_said: options.unavailable_said,
        }
    }

    /// Notifies what is new in a read, each batch on a task of its own.
    fn observe(&mut self, snapshot: &Snapshot, sender: &mpsc::Sender<Message>) {
        if self.failed.load(Ordering::Relaxed) {
            return;
        }
        for batch in self.tracker.observe(&snapshot.panes, Instant::now()) {
            tokio::spawn(notify_batch(
                batch,
                self.timeout,
                self.failed.clone(),
                self.unavailable_said.clone(),
                sender.clone(),
            ));
        }
    }
}

/// Sends one notification; the first failure is said once.
async fn notify_batch(
    batch: NewItems,
    timeout: Duration,
    failed: Arc<AtomicBool>,
    said: PathBuf,
    sender: mpsc::Sender<Message>,
) {
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
}

/// Carries out what the update asks for besides quitting: its answers
/// come back as messages.
struct Worker {
    sender: mpsc::Sender<Message>,
    /// What the poller reads: a change wakes it at once, NOTIFY's gap aside.
    settings: watch::Sender<PollSettings>,
    connect: ConnectSettings,
    settle_request: SettleRequest,
    /// A small pool of its own for details, made with the first.
    detail_pool: Option<LedgerPool>,
    /// Confirmed actions under way.
    actions: Vec<JoinHandle<()>>,
}

impl Worker {
    fn carry_out(&mut self, task: Task, app: &mut App, theme: &mut Theme) {
        match task {
            Task::Quit => {}
            Task::Repoll => {
                let _ = self.settings.send(app.poll_settings());
            }
            Task::SwitchTheme(name) => {
                if let Some(built_in) = Theme::built_in(name) {
                    *theme = built_in;
                }
            }
            Task::LoadDetail(op_key) => self.load_detail(op_key),
            Task::Settle(request) => self.settle(request),
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

    fn load_detail(&mut self, op_key: String) {
        if self.detail_pool.is_none() {
            let mut connect = self.connect.clone();
            connect.max_connections = 2;
            self.detail_pool = crate::ledger::connect_lazy(&connect).ok();
        }
        if let Some(pool) = self.detail_pool.clone() {
            let sender = self.sender.clone();
            tokio::spawn(async move {
                let result = history::load(&pool, &op_key)
                    .await
                    .map(Box::new)
                    .map_err(|e| e.to_string());
                let _ = sender.send(Message::Detail(op_key, result)).await;
            });
        }
    }

    fn settle(&mut self, request: Request) {
        let (sender, settle_request) = (self.sender.clone(), self.settle_request.clone());
        self.actions.retain(|task| !task.is_finished());
        self.actions.push(tokio::spawn(async move {
            let result = settle_request(request.clone()).await;
            let _ = sender.send(Message::Settled { request, result }).await;
        }));
    }
}

/// Quits once the confirmed actions still under way have finished, saying
/// so meanwhile.
async fn quit(
    terminal: &mut DefaultTerminal,
    app: &mut App,
    theme: &Theme,
    mut actions: Vec<JoinHandle<()>>,
    messages: &mut mpsc::Receiver<Message>,
) -> std::io::Result<()> {
    actions.retain(|task| !task.is_finished());
    if !actions.is_empty() {
        app.set_status(
            format!("finishing {} action(s)…", actions.len()),
            super::theme::Role::Muted,
        );
        terminal.draw(|frame| views::draw(frame, app, theme))?;
        finish(actions, messages).await;
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
