//! The console's render benchmark: `cargo bench --bench render`.
//!
//! 1. **Frame time**: `Terminal::draw` of the whole console into a 200x50
//!    `TestBackend`, the selection moving between frames, for a pane of 100
//!    open items and of 100,000, the latter two ways: (a) what the poller
//!    holds for 100,000 open items (one window of `app::WINDOW` rows, the
//!    count says 100,000) and (b) all 100,000 rows force-fed, to show the
//!    render path itself does not depend on the number of rows held.
//! 2. **Model rebuild**: `App::update(Message::Snapshot)`, the per-poll cost
//!    of turning ledger rows into display cells, for the same three sizes.
//! 3. **Peak memory**: a child process (this binary again) reports VmHWM
//!    before building anything and after holding an App with snapshot (b)
//!    and rendering 100 frames; (a) is measured the same way for comparison.
//!
//! Sizes from the environment: `EW_RENDER_FRAMES` [2000] timed frames per
//! case, `EW_RENDER_UPDATES` [200] timed updates for small snapshots (the
//! 100,000-row one runs a tenth of that). Results go to stdout.

#[path = "../tests/fixtures/mod.rs"]
mod fixtures;

use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::TestBackend;

use effectwatch::console::app::{App, Message, Settings, Snapshot, View, WINDOW};
use effectwatch::console::theme::Theme;
use effectwatch::console::views;
use effectwatch::ledger::panes::Pane;

const WIDTH: u16 = 200;
const HEIGHT: u16 = 50;
const LARGE: usize = 100_000;
const SMALL: usize = 100;
/// Set in the child process that measures memory; its value names the case.
const PROBE: &str = "EW_RENDER_MEMORY_PROBE";

#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    /// Rows the snapshot carries.
    rows: usize,
    /// Open items the counts report.
    total: usize,
}

const CASES: [Case; 3] = [
    Case {
        name: "100 items",
        rows: SMALL,
        total: SMALL,
    },
    Case {
        name: "100k items, poller window (a)",
        rows: WINDOW,
        total: LARGE,
    },
    Case {
        name: "100k items, all rows held (b)",
        rows: LARGE,
        total: LARGE,
    },
];

fn main() {
    if let Ok(case) = std::env::var(PROBE) {
        memory_probe(&case);
        return;
    }
    let frames = env_usize("EW_RENDER_FRAMES", 2_000);
    let updates = env_usize("EW_RENDER_UPDATES", 200);
    let theme = Theme::default();

    println!(
        "# Console rendering ({WIDTH}x{HEIGHT} TestBackend, overdue pane, console::fixtures data)\n"
    );
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at start: {}\n", load.trim());
    }
    println!("## Frame time: Terminal::draw of the whole console, {frames} frames per case\n");
    println!("| case | rows held | mean | p50 | p99 | max | CPU per frame |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut apps: Vec<App> = CASES.into_iter().map(app_for).collect();
    let mut results = Vec::new();
    for (case, times) in CASES
        .into_iter()
        .zip(time_frames(&mut apps, &theme, frames))
    {
        let cpu = times.cpu / times.wall.len() as u32;
        let stats = Stats::of(times.wall);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            case.name,
            case.rows,
            ms(stats.mean),
            ms(stats.p50),
            ms(stats.p99),
            ms(stats.max),
            ms(cpu)
        );
        results.push((stats, cpu));
    }
    println!();
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    for (index, label) in [(1, "(a)"), (2, "(b)")] {
        let ((stats, cpu), (base, base_cpu)) = (&results[index], &results[0]);
        println!(
            "ratio 100k{label}/100: mean {:.2}x, p50 {:.2}x, p99 {:.2}x, CPU {:.2}x",
            ratio(stats.mean, base.mean),
            ratio(stats.p50, base.p50),
            ratio(stats.p99, base.p99),
            ratio(*cpu, *base_cpu)
        );
    }
    println!("\n## Model rebuild: App::update(Message::Snapshot), per poll\n");
    println!("| case | rows | runs | mean | p50 | p99 |");
    println!("|---|---:|---:|---:|---:|---:|");
    for case in CASES {
        let runs = if case.rows >= LARGE {
            (updates / 10).max(3)
        } else {
            updates
        };
        let stats = Stats::of(time_updates(case, runs));
        println!(
            "| {} | {} | {runs} | {} | {} | {} |",
            case.name,
            case.rows,
            ms(stats.mean),
            ms(stats.p50),
            ms(stats.p99)
        );
    }

    println!("\n## Peak memory (a child process holding the App, 100 frames drawn)\n");
    println!(
        "| case | baseline VmHWM | rows alone | peak VmHWM | peak − baseline | VmRSS at end |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (probe, case) in [("a", CASES[1]), ("b", CASES[2])] {
        let memory = run_probe(probe);
        println!(
            "| {} | {:.1} MB | {:.1} MB | {:.1} MB | {:.1} MB | {:.1} MB |",
            case.name,
            mb(memory.baseline),
            mb(memory.rows_built.saturating_sub(memory.baseline)),
            mb(memory.peak),
            mb(memory.peak.saturating_sub(memory.baseline)),
            mb(memory.resident)
        );
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The console's fixtures (the other panes, escalations and audit as in the
/// screenshots) with `case.rows` overdue items out of `case.total`. The
/// fixture keys repeat past 53,400 rows, so each gets its index: a real
/// ledger's keys are unique, and the selection looks items up by key.
fn snapshot(case: Case) -> Snapshot {
    let mut rows = fixtures::overdue_rows(case.rows);
    for (index, row) in rows.iter_mut().enumerate() {
        row.op_key = format!("refund:INV-{index:06}:AP-{}:v1", 10 + index % 89);
        row.effect_id = index as i64;
    }
    fixtures::snapshot_with(rows, case.total as i64)
}

fn app_for(case: Case) -> App {
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(Box::new(snapshot(case))));
    app
}

/// Each frame selects another row, spread over everything held, so pages
/// change and the diff against the previous frame is not empty.
fn select(app: &mut App, frame: usize) {
    let rows = app.model_of(View::Pane(Pane::Overdue)).rows.len();
    let index = (frame * 7_919) % rows;
    app.select(View::Pane(Pane::Overdue), index);
}

/// What one case's frames cost: wall time per frame, and CPU time of this
/// thread over all of them (the scheduler's count, so time the thread
/// waited while other processes ran is not in it).
struct FrameTimes {
    wall: Vec<Duration>,
    cpu: Duration,
}

/// Frames of every case, interleaved in blocks of 100 so that noise from
/// the rest of the machine falls on all cases alike.
fn time_frames(apps: &mut [App], theme: &Theme, frames: usize) -> Vec<FrameTimes> {
    const BLOCK: usize = 100;
    let mut terminals: Vec<Terminal<TestBackend>> = apps
        .iter()
        .map(|_| Terminal::new(TestBackend::new(WIDTH, HEIGHT)).unwrap())
        .collect();
    let mut times: Vec<FrameTimes> = apps
        .iter()
        .map(|_| FrameTimes {
            wall: Vec::with_capacity(frames),
            cpu: Duration::ZERO,
        })
        .collect();
    let warmup = BLOCK;
    for block in 0..(warmup + frames).div_ceil(BLOCK) {
        for (case, (app, terminal)) in apps.iter_mut().zip(&mut terminals).enumerate() {
            let cpu_before = thread_cpu_time();
            for frame in block * BLOCK..(block + 1) * BLOCK {
                select(app, frame);
                let started = Instant::now();
                terminal.draw(|f| views::draw(f, app, theme)).unwrap();
                if frame >= warmup {
                    times[case].wall.push(started.elapsed());
                }
            }
            if block * BLOCK >= warmup {
                times[case].cpu += thread_cpu_time() - cpu_before;
            }
        }
    }
    times
}

/// CPU time this thread has run, from /proc/thread-self/schedstat (ns).
fn thread_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = stat
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

fn time_updates(case: Case, runs: usize) -> Vec<Duration> {
    let template = snapshot(case);
    let mut app = app_for(case);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let next = Box::new(template.clone());
        let started = Instant::now();
        app.update(Message::Snapshot(next));
        times.push(started.elapsed());
    }
    times
}

struct Stats {
    mean: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Stats {
    fn of(mut times: Vec<Duration>) -> Stats {
        times.sort();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        Stats {
            mean: times.iter().sum::<Duration>() / times.len() as u32,
            p50: at(0.50),
            p99: at(0.99),
            max: *times.last().unwrap(),
        }
    }
}

fn ms(duration: Duration) -> String {
    format!("{:.3} ms", duration.as_secs_f64() * 1e3)
}

fn mb(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A field of /proc/self/status in KiB: VmHWM (peak resident set) or VmRSS.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("reading /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// What the child measured, in KiB.
struct Memory {
    baseline: u64,
    /// Peak once the snapshot's rows exist, before the App sees them.
    rows_built: u64,
    /// Peak after App::update and 100 frames.
    peak: u64,
    /// Resident at the end, with the App still held.
    resident: u64,
}

/// In the child: the peak before and after holding the App and drawing.
fn memory_probe(case: &str) {
    let case = match case {
        "a" => CASES[1],
        _ => CASES[2],
    };
    let theme = Theme::default();
    let mut terminal = Terminal::new(TestBackend::new(WIDTH, HEIGHT)).unwrap();
    let baseline = status_kib("VmHWM");
    let snapshot = Box::new(snapshot(case));
    let rows_built = status_kib("VmHWM");
    let mut app = App::new(Settings::new("ops", false, Duration::from_secs(2)));
    app.update(Message::Snapshot(snapshot));
    for frame in 0..100 {
        select(&mut app, frame);
        terminal.draw(|f| views::draw(f, &app, &theme)).unwrap();
    }
    let peak = status_kib("VmHWM");
    let resident = status_kib("VmRSS");
    std::hint::black_box(&app);
    println!("{baseline} {rows_built} {peak} {resident}");
}

fn run_probe(case: &str) -> Memory {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .env(PROBE, case)
        .output()
        .expect("running the memory probe");
    assert!(
        output.status.success(),
        "memory probe failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let numbers: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().expect("a number of KiB"))
        .collect();
    Memory {
        baseline: numbers[0],
        rows_built: numbers[1],
        peak: numbers[2],
        resident: numbers[3],
    }
}
