//! Renders the console's main views from the real drawing code on fixed
//! data into `screenshots/*.png` (through SVG): the README's pictures.
//!
//! cargo run --example screenshots

#[path = "../tests/fixtures/mod.rs"]
mod fixtures;

use std::fmt::Write as _;
use std::path::Path;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use effectwatch::console::app::{App, Message, Settings};
use effectwatch::console::theme::Theme;
use effectwatch::console::views;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::{Color, Modifier};

const COLUMNS: u16 = 150;
const ROWS: u16 = 32;
const CELL_WIDTH: f32 = 8.43;
const CELL_HEIGHT: f32 = 18.0;
const FONT_SIZE: f32 = 14.0;

fn main() {
    if let Err(error) = run() {
        eprintln!("screenshots: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let out = Path::new("screenshots");
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut fonts = resvg::usvg::Options::default();
    fonts.fontdb_mut().load_system_fonts();
    if fonts.fontdb_mut().faces().next().is_none() {
        return Err("no fonts found on this system (install fonts-dejavu-core)".into());
    }
    let dark = Theme::default();
    let shots: Vec<(&str, Vec<Vec<KeyEvent>>)> = vec![
        ("overdue", vec![]),
        ("unknown", vec![key('2')]),
        ("duplicates", vec![key('3'), key('v')]),
        ("held", vec![key('4')]),
        ("escalations", vec![key('5')]),
        ("audit", vec![key('6')]),
        ("finance", vec![key('7')]),
        ("audit-entry", vec![key('6'), enter()]),
        ("help", vec![key('2'), key('?')]),
        (
            "filter",
            vec![
                key('/'),
                key('t'),
                key('a'),
                key('r'),
                key('g'),
                key('e'),
                key('t'),
                key(':'),
                key('I'),
                key('N'),
                key('V'),
            ],
        ),
        (
            "dialog",
            vec![
                key('2'),
                key('c'),
                typed("duplicate refund confirmed by issuer"),
                tab(),
                typed(":v1"),
            ],
        ),
    ];
    for (name, keys) in &shots {
        let app = app_after(keys, false);
        save(&app, &dark, &out.join(format!("{name}.png")), &fonts)?;
    }
    let mut detail = app_after(&[key('2'), enter()], false);
    detail.update(Message::Detail(
        fixtures::history().effect.op_key.clone(),
        Ok(Box::new(fixtures::history())),
    ));
    save(&detail, &dark, &out.join("detail.png"), &fonts)?;
    let read_only = app_after(&[key('2'), key('?')], true);
    save(&read_only, &dark, &out.join("read-only-help.png"), &fonts)?;
    for theme in ["light", "high-contrast", "colour-blind"] {
        let theme = Theme::built_in(theme).ok_or("a built-in theme is missing")?;
        let app = app_after(&[key('2')], false);
        save(
            &app,
            &theme,
            &out.join(format!("theme-{}.png", theme.name)),
            &fonts,
        )?;
    }
    println!("screenshots written to {}", out.display());
    Ok(())
}

fn key(ch: char) -> Vec<KeyEvent> {
    vec![KeyEvent::new(KeyCode::Char(ch), KeyModifiers::NONE)]
}

fn enter() -> Vec<KeyEvent> {
    vec![KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)]
}

fn tab() -> Vec<KeyEvent> {
    vec![KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE)]
}

fn typed(text: &str) -> Vec<KeyEvent> {
    text.chars().flat_map(key).collect()
}

fn app_after(keys: &[Vec<KeyEvent>], read_only: bool) -> App {
    let mut app = App::new(Settings::new(
        "alice",
        read_only,
        std::time::Duration::from_secs(2),
    ));
    app.update(Message::Snapshot(Box::new(fixtures::snapshot(24))));
    app.update(Message::Background(
        "sim: 4 agents · 312 effects · 281 ok · 14 lost responses · 6 crashes · 9 held".into(),
    ));
    for key in keys.iter().flatten() {
        app.update(Message::Key(*key));
    }
    app
}

fn save(app: &App, theme: &Theme, path: &Path, fonts: &resvg::usvg::Options) -> Result<(), String> {
    let mut terminal = Terminal::new(TestBackend::new(COLUMNS, ROWS)).map_err(|e| e.to_string())?;
    terminal
        .draw(|frame| views::draw(frame, app, theme))
        .map_err(|e| e.to_string())?;
    let svg = to_svg(terminal.backend().buffer(), theme);
    let tree = resvg::usvg::Tree::from_str(&svg, fonts)
        .map_err(|e| format!("SVG for {}: {e}", path.display()))?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("empty image")?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap
        .save_png(path)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("{}", path.display());
    Ok(())
}

/// The terminal's default colours, where a theme says "reset".
fn canvas(theme: &Theme) -> (&'static str, &'static str) {
    match theme.name.as_str() {
        "light" => ("#1c1c1c", "#fafafa"),
        _ => ("#d0d0d0", "#1a1b1e"),
    }
}

fn hex(color: Color, default: &str) -> String {
    let named = |index: usize| XTERM[index].to_string();
    match color {
        Color::Reset => default.to_string(),
        Color::Rgb(r, g, b) => format!("#{r:02x}{g:02x}{b:02x}"),
        Color::Black => named(0),
        Color::Red => named(1),
        Color::Green => named(2),
        Color::Yellow => named(3),
        Color::Blue => named(4),
        Color::Magenta => named(5),
        Color::Cyan => named(6),
        Color::Gray => named(7),
        Color::DarkGray => named(8),
        Color::LightRed => named(9),
        Color::LightGreen => named(10),
        Color::LightYellow => named(11),
        Color::LightBlue => named(12),
        Color::LightMagenta => named(13),
        Color::LightCyan => named(14),
        Color::White => named(15),
        Color::Indexed(index) => XTERM
            .get(index as usize)
            .map(|c| c.to_string())
            .unwrap_or_else(|| default.to_string()),
    }
}

const XTERM: [&str; 16] = [
    "#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
    "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff",
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn to_svg(buffer: &Buffer, theme: &Theme) -> String {
    let (default_fg, default_bg) = canvas(theme);
    let width = buffer.area.width as f32 * CELL_WIDTH + 20.0;
    let height = buffer.area.height as f32 * CELL_HEIGHT + 20.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"><rect width="100%" height="100%" fill="{default_bg}" rx="6"/><g transform="translate(10,10)" font-family="DejaVu Sans Mono, monospace" font-size="{FONT_SIZE}">"#
    );
    for y in 0..buffer.area.height {
        let mut x = 0;
        while x < buffer.area.width {
            let cell = &buffer[(x, y)];
            let style = (cell.fg, cell.bg, cell.modifier);
            let mut text = String::new();
            let start = x;
            while x < buffer.area.width {
                let next = &buffer[(x, y)];
                if (next.fg, next.bg, next.modifier) != style {
                    break;
                }
                text.push_str(next.symbol());
                x += 1;
            }
            let reversed = style.2.contains(Modifier::REVERSED);
            let (mut fg, mut bg) = (hex(style.0, default_fg), hex(style.1, default_bg));
            if reversed {
                std::mem::swap(&mut fg, &mut bg);
            }
            let (px, py) = (start as f32 * CELL_WIDTH, y as f32 * CELL_HEIGHT);
            let run = (x - start) as f32 * CELL_WIDTH;
            if bg != default_bg {
                let _ = write!(
                    svg,
                    r#"<rect x="{px}" y="{py}" width="{run}" height="{CELL_HEIGHT}" fill="{bg}"/>"#
                );
            }
            if !text.trim().is_empty() {
                let weight = if style.2.contains(Modifier::BOLD) {
                    r#" font-weight="bold""#
                } else {
                    ""
                };
                let decoration = if style.2.contains(Modifier::UNDERLINED) {
                    r#" text-decoration="underline""#
                } else if style.2.contains(Modifier::CROSSED_OUT) {
                    r#" text-decoration="line-through""#
                } else {
                    ""
                };
                let _ = write!(
                    svg,
                    r#"<text x="{px}" y="{}" fill="{fg}"{weight}{decoration} textLength="{run}" lengthAdjust="spacingAndGlyphs" xml:space="preserve">{}</text>"#,
                    py + CELL_HEIGHT * 0.75,
                    escape(&text)
                );
            }
        }
    }
    svg.push_str("</g></svg>");
    svg
}
