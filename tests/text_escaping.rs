//! Invisible characters in ledger text (zero-width spaces and joiners, byte
//! order marks, bidi controls) are shown as visible escapes by `list`,
//! `show` and `report`: nothing invisible reaches the terminal, and two keys
//! that differ by one such character never look the same.

mod fixtures;

use chrono::{TimeZone, Utc};
use effectwatch::cli::report::assembly::{PaneEntry, Report, ReportScope};
use effectwatch::cli::report::{csv_text, markdown};
use effectwatch::ledger::panes::{Pane, PaneRows};

/// U+200B zero width space, U+200D zero width joiner, U+FEFF byte order mark.
const KEY: &str = "hu-\u{200b}zero\u{200d}width\u{feff}-e";
const SHOWN: &str = "hu-\\u{200B}zero\\u{200D}width\\u{FEFF}-e";
/// The same key, but for the invisible characters.
const TWIN: &str = "hu-zerowidth-e";

fn assert_nothing_invisible(text: &str) {
    for ch in ['\u{200b}', '\u{200d}', '\u{feff}', '\u{2060}', '\u{202e}'] {
        assert!(
            !text.contains(ch),
            "U+{:04X} reached the output:\n{text}",
            ch as u32
        );
    }
}

#[test]
fn list_shows_invisible_characters_as_escapes() {
    let mut rows = fixtures::held_rows();
    rows[0].op_key = KEY.into();
    rows[0].holder_op_key = TWIN.into();
    rows[1].op_key = format!("refund:\u{2060}{}", rows[1].op_key);
    let table = effectwatch::cli::list::render_table(&PaneRows::Held(rows)).to_string();
    assert_nothing_invisible(&table);
    let row = table
        .lines()
        .find(|line| line.contains("INV-402"))
        .unwrap_or_else(|| panic!("no row for INV-402:\n{table}"));
    assert!(row.contains(SHOWN), "{row}");
    assert!(row.contains(TWIN), "the twin key shows as itself: {row}");
    assert!(table.contains("refund:\\u{2060}refund:INV-466"), "{table}");
    // Every row of the table is as wide as the others: widths count the escapes.
    let widths: Vec<usize> = table.lines().map(|l| l.chars().count()).collect();
    assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
}

#[test]
fn show_shows_invisible_characters_as_escapes() {
    let mut history = fixtures::history();
    history.effect.op_key = KEY.into();
    history.effect.target = "invoice:\u{200b}402".into();
    history.effect.params = serde_json::json!({ "note": "a\u{200d}b" });
    let text = effectwatch::cli::show::render(&history);
    assert_nothing_invisible(&text);
    assert!(text.contains(SHOWN), "{text}");
    assert!(text.contains("invoice:\\u{200B}402"), "{text}");
    assert!(text.contains("a\\u{200D}b"), "{text}");
}

#[test]
fn reports_show_invisible_characters_as_escapes() {
    let at = |minute| Utc.with_ymd_and_hms(2026, 11, 30, 14, minute, 0).unwrap();
    let entry = |op_key: &str| PaneEntry {
        pane: Pane::Held,
        effect_id: 1,
        op_key: op_key.into(),
        target: "invoice:\u{200b}402".into(),
        action: "refund".into(),
        amount_minor: Some(1500),
        currency: Some("EUR".into()),
        entered_at: at(1),
        resolved_at: None,
        resolved_to: None,
        duration_ms: 60_000,
    };
    let report = Report {
        scope: ReportScope {
            since: at(0),
            until: at(30),
            target: Some("\u{feff}invoice".into()),
            action: None,
        },
        generated_at: at(31),
        summary: Vec::new(),
        entries: vec![entry(KEY), entry(TWIN)],
        reconciliations: Vec::new(),
        operator_actions: Vec::new(),
        open_at_end: Vec::new(),
        counts_at_end: Vec::new(),
        worst: Vec::new(),
    };
    let text = markdown(&report);
    assert_nothing_invisible(&text);
    // Markdown escapes the backslash, so the cell reads \u{200B} when rendered.
    assert!(
        text.contains("hu-\\\\u{200B}zero\\\\u{200D}width\\\\u{FEFF}-e"),
        "{text}"
    );
    assert!(text.contains(&format!("| {TWIN} |")), "{text}");
    assert!(text.contains("“\\\\u{FEFF}invoice”"), "{text}");
    assert_eq!(csv_text(KEY), SHOWN);
}

/// U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR break a line in
/// many terminals and editors, like a newline nobody sees coming: shown as
/// escapes wherever ledger text is shown, in tables, `show` and JSON.
#[test]
fn line_and_paragraph_separators_are_escaped_like_other_separators() {
    let key = "refund:INV-\u{2028}402\u{2029}:v1";
    let shown = "refund:INV-\\u{2028}402\\u{2029}:v1";
    let mut rows = fixtures::held_rows();
    rows[0].op_key = key.into();
    let table = effectwatch::cli::list::render_table(&PaneRows::Held(rows)).to_string();
    assert!(!table.contains(['\u{2028}', '\u{2029}']), "{table}");
    assert!(table.contains(shown), "{table}");

    let mut history = fixtures::history();
    history.effect.op_key = key.into();
    history.effect.params = serde_json::json!({ "note": "a\u{2028}b\u{2029}c" });
    let text = effectwatch::cli::show::render(&history);
    assert!(!text.contains(['\u{2028}', '\u{2029}']), "{text}");
    assert!(text.contains(shown), "{text}");

    assert_eq!(
        effectwatch::text::sanitize_line("a\u{2028}b\u{2029}c"),
        "a\\u{2028}b\\u{2029}c"
    );
    let json = effectwatch::text::safe_json(&serde_json::json!({ "key": key }));
    assert!(!json.contains(['\u{2028}', '\u{2029}']), "{json}");
    assert!(
        json.contains("\\u2028") && json.contains("\\u2029"),
        "{json}"
    );
    let back: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(back["key"], key);
}
