//! Untrusted text from the ledger (keys, targets, params, provider messages)
//! made safe for a terminal: no control characters, escape sequences, bidi
//! overrides or invisible characters ever reach it, whoever wrote the row.

use std::fmt::Write as _;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Replaces every character that could move the cursor, change colours,
/// talk to the terminal (ESC, CSI, OSC, DCS…), reorder text (bidi
/// controls) or not show at all (zero-width and other format characters)
/// with a visible escape, `\u{200B}`, keeping all other text as it is.
/// Two keys that differ by one such character look different.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if ch != '\n' && ch != '\t' && is_hidden(ch) {
            let _ = write!(out, "\\u{{{:04X}}}", ch as u32);
        } else {
            out.push(ch);
        }
    }
    out
}

/// Like [`sanitize`] but also folds newlines and tabs into spaces, for a
/// value shown on one line of a table.
pub fn sanitize_line(text: &str) -> String {
    let folded: String = text
        .chars()
        .map(|ch| {
            if ch == '\n' || ch == '\r' || ch == '\t' {
                ' '
            } else {
                ch
            }
        })
        .collect();
    sanitize(&folded)
}

/// Controls (Unicode category Cc), format characters (Cf) and the line and
/// paragraph separators (Zl, Zp: U+2028, U+2029): what a terminal obeys,
/// draws as nothing, or takes as a line break nobody sees coming.
fn is_hidden(ch: char) -> bool {
    matches!(
        ch.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// Longest run without whitespace an error line keeps whole.
const MESSAGE_WORD: usize = 120;
/// Longest error line.
const MESSAGE_LINE: usize = 1000;

/// A message for one line of a terminal: sanitized, every run without
/// whitespace longer than 120 characters (a 100 kB key, a body) cut in
/// the middle so its start and end still show, and the whole line at most
/// 1,000 characters.
pub fn message_line(text: &str) -> String {
    let clean = sanitize_line(text);
    let mut out = String::with_capacity(clean.len().min(MESSAGE_LINE * 4));
    let mut word = String::new();
    for ch in clean.chars() {
        if ch.is_whitespace() {
            out.push_str(&truncate_middle(&std::mem::take(&mut word), MESSAGE_WORD));
            out.push(ch);
        } else {
            word.push(ch);
        }
    }
    out.push_str(&truncate_middle(&word, MESSAGE_WORD));
    truncate_middle(&out, MESSAGE_LINE)
}

/// Shortens to at most `width` characters, with an ellipsis when cut.
pub fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = text.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// JSON for a terminal or a pipe: controls and invisible characters inside
/// strings are written as `\uXXXX` escapes, which every JSON reader
/// decodes back.
pub fn safe_json(value: &impl serde::Serialize) -> String {
    let raw = serde_json::to_string_pretty(value).unwrap_or_else(|error| {
        serde_json::json!({ "error": format!("cannot encode as JSON: {error}") }).to_string()
    });
    let mut out = String::with_capacity(raw.len());
    for ch in raw.chars() {
        // Newlines outside strings are the layout; inside, serde escapes them.
        if ch != '\n' && is_hidden(ch) {
            for unit in ch.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// Shortens to at most `width` characters by cutting the middle: keys
/// and targets differ at their ends (`…:AP-91:v1` and `…:AP-91:v2`).
pub fn truncate_middle(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        return text.to_string();
    }
    if width < 5 {
        return truncate(text, width);
    }
    let tail = (width - 1) / 2;
    let head = width - 1 - tail;
    let mut out: String = text.chars().take(head).collect();
    out.push('…');
    out.extend(text.chars().skip(count - tail));
    out
}

/// Longest name [`truncate_names`] cuts word by word; a longer one (a
/// hostile 100 kB key) is cut in the middle at once.
const NAME_WORDS_UP_TO: usize = 200;

/// Names shown together (keys, targets, holders) cut to `width` where they
/// say least, never where they tell items apart. In this order:
/// 1. a remark after the name (from a space: a holder's overlap) goes
///    first, leaving ` …`;
/// 2. words (runs of letters and digits) that another name holds at the
///    same place — the same `:`-separated part, shaped alike, the same
///    word of it — those most names share first, then from the left; a
///    run of cut words reads `…`, and words shared alike side by side
///    (`7.024605`) go as one;
/// 3. the kind (the first part: `refund`) and the labels of numbers
///    (`INV-`, `room-`, `C-`), from the left: the numbers name the item
///    (invoice, room, date, customer), and `first`, `second`, `welcome`
///    say which of its effects it is;
/// 4. the middle of what is left, keeping both ends.
///
/// So `refund:INV-2024-000813:second` beside `refund:INV-2024-000977:first`
/// reads `…-000813:second`, and a lone `booking:room-204:2026-12-06:4`
/// reads `…-204:2026-12-06:4`, never `booking:r…-06:4`. Two different
/// names never read alike: where they would, the part where they differ
/// is shown.
pub fn truncate_names(texts: &[&str], width: usize) -> Vec<String> {
    if texts.iter().all(|text| text.chars().count() <= width) {
        return texts.iter().map(|text| text.to_string()).collect();
    }
    let mut distinct: Vec<&str> = texts.iter().map(|text| name_and_remark(text).0).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let mut holders: std::collections::HashMap<Place, usize> = std::collections::HashMap::new();
    for name in distinct {
        if name.chars().count() <= NAME_WORDS_UP_TO {
            for word in words(name) {
                *holders.entry(word.place(name)).or_default() += 1;
            }
        }
    }
    let plain: Vec<String> = texts
        .iter()
        .map(|text| {
            if text.chars().count() <= width {
                return text.to_string();
            }
            let (name, remark) = name_and_remark(text);
            let (room, mark) = match remark {
                "" => (width, ""),
                _ => (width.saturating_sub(2), " …"),
            };
            format!("{}{mark}", cut_name(name, room, &holders))
        })
        .collect();
    let mut cuts = plain.clone();
    for index in 0..texts.len() {
        let clash = (0..texts.len()).find(|&other| {
            other != index && plain[other] == plain[index] && texts[other] != texts[index]
        });
        if let Some(other) = clash {
            let differs_at = texts[index]
                .chars()
                .zip(texts[other].chars())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| {
                    texts[index]
                        .chars()
                        .count()
                        .min(texts[other].chars().count())
                });
            cuts[index] = cut_around(texts[index], width, differs_at);
        }
    }
    cuts
}

/// A name, and what follows it from its first space (`(12-06 14:00–16:00)`);
/// a marker before it (`‖ `, `→ `) is part of the name.
fn name_and_remark(text: &str) -> (&str, &str) {
    let start = text.find(char::is_alphanumeric).unwrap_or(text.len());
    match text[start..].find(char::is_whitespace) {
        Some(at) => text.split_at(start + at),
        None => (text, ""),
    }
}

/// One name in `width`, by steps 2 to 4 of [`truncate_names`].
fn cut_name<'a>(
    name: &'a str,
    width: usize,
    holders: &std::collections::HashMap<Place<'a>, usize>,
) -> String {
    let length = name.chars().count();
    if length <= width {
        return name.to_string();
    }
    if length > NAME_WORDS_UP_TO {
        return truncate_middle(name, width);
    }
    let words = words(name);
    let shared = |index: usize| holders.get(&words[index].place(name)).copied().unwrap_or(0);
    let text_of = |index: usize| &name[words[index].start..words[index].end];
    // The kind (the first part) and a word of letters before a number in
    // its part (`INV-`, `room-`, `C-`, `evt_`): they say what the number
    // is; `first`, `second`, `welcome` say which.
    let label = |index: usize| {
        let word = &words[index];
        text_of(index).chars().all(char::is_alphabetic)
            && (word.part == 0
                || words.get(index + 1).is_some_and(|next| {
                    next.part == word.part && text_of(index + 1).chars().any(|c| c.is_numeric())
                }))
    };
    // Each step: the word, and the group it is cut with.
    let mut steps: Vec<(usize, usize)> = (0..words.len())
        .filter(|&index| shared(index) > 1)
        .map(|index| (index, shared(index)))
        .collect();
    steps.sort_by_key(|&(index, holders)| (std::cmp::Reverse(holders), index));
    steps.extend(
        (0..words.len())
            .filter(|&index| shared(index) <= 1 && label(index))
            .map(|index| (index, 0)),
    );
    let mut cut = vec![false; words.len()];
    let (mut shown, mut length) = (name.to_string(), length);
    // One word always stays: `…` alone names nothing.
    for (step, &(index, group)) in steps.iter().take(words.len().saturating_sub(1)).enumerate() {
        cut[index] = true;
        let shorter = without(name, &words, &cut);
        let shorter_length = shorter.chars().count();
        // A word alone no longer than its `…` stays: cutting it hides
        // something and gains nothing.
        let run_goes_on = steps
            .get(step + 1)
            .is_some_and(|&(next, next_group)| next == index + 1 && next_group == group);
        if shorter_length >= length && !run_goes_on {
            cut[index] = false;
            continue;
        }
        (shown, length) = (shorter, shorter_length);
        if length <= width {
            return shown;
        }
    }
    truncate_middle(&shown, width)
}

/// Where a word stands in a name: its `:`-separated part, how many words
/// that part has, and which of them it is; and the word.
type Place<'a> = (usize, usize, usize, &'a str);

/// A word of a name and where it stands.
struct Word {
    part: usize,
    /// How many words its part has (`AP-12` two, `2026-12-06` three).
    part_words: usize,
    index: usize,
    start: usize,
    end: usize,
}

impl Word {
    fn place<'a>(&self, name: &'a str) -> Place<'a> {
        (
            self.part,
            self.part_words,
            self.index,
            &name[self.start..self.end],
        )
    }
}

fn words(text: &str) -> Vec<Word> {
    let mut words: Vec<Word> = Vec::new();
    let (mut part, mut index, mut start) = (0, 0, None);
    for (at, ch) in text.char_indices().chain([(text.len(), ':')]) {
        if ch.is_alphanumeric() {
            start.get_or_insert(at);
            continue;
        }
        if let Some(start) = start.take() {
            words.push(Word {
                part,
                part_words: 0,
                index,
                start,
                end: at,
            });
            index += 1;
        }
        if ch == ':' {
            for word in words.iter_mut().rev().take(index) {
                word.part_words = index;
            }
            part += 1;
            index = 0;
        }
    }
    words
}

/// `text` with the `cut` words left out: each run of them, with what
/// stands between them, becomes one `…`.
fn without(text: &str, words: &[Word], cut: &[bool]) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut index) = (0, 0);
    while index < words.len() {
        if !cut[index] {
            index += 1;
            continue;
        }
        let mut last = index;
        while last + 1 < words.len() && cut[last + 1] {
            last += 1;
        }
        out.push_str(&text[copied..words[index].start]);
        out.push('…');
        copied = words[last].end;
        index = last + 1;
    }
    out.push_str(&text[copied..]);
    out
}

/// `text` in `width` characters: its first and last few, and the part
/// around character `focus`, with an ellipsis for each cut.
fn cut_around(text: &str, width: usize, focus: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    let count = chars.len();
    if count <= width || width < 9 {
        return truncate_middle(text, width);
    }
    let (head, tail) = (3, 3);
    let window = width - head - tail - 2;
    let start = focus
        .saturating_sub(window / 2)
        .clamp(head, count - tail - window);
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[start..start + window]);
    out.push('…');
    out.extend(&chars[count - tail..]);
    out
}

/// toml's errors span several lines with a caret drawing; an operator
/// needs `line N, column M: message`.
pub fn one_line_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().replace('\n', " ");
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

#[cfg(test)]
mod distinct_tests {
    use super::*;

    #[test]
    fn keys_that_differ_in_the_middle_or_at_the_end_never_read_alike() {
        for keys in [
            ["refund:INV-0001-A:attempt-1", "refund:INV-0002-A:attempt-1"],
            ["refund:INV-DBL:approval-1", "refund:INV-DBL:approval-2"],
        ] {
            for width in [9, 12, 14, 18] {
                let cuts = truncate_names(&keys, width);
                assert_ne!(cuts[0], cuts[1], "{keys:?} at {width}: {cuts:?}");
                for cut in &cuts {
                    assert!(cut.chars().count() <= width, "{cut}");
                }
            }
        }
        assert_eq!(truncate_names(&["a:1", "a:2"], 10), ["a:1", "a:2"]);
    }

    /// #46: `refund:IN…-13:second`, `booking:r…024605-4-8` — cut in the
    /// middle, the invoice, the room and the date were gone, and the
    /// prefix every key shares was kept.
    #[test]
    fn names_are_cut_where_they_agree_never_where_they_differ() {
        let keys = [
            "refund:INV-2024-000813:second",
            "refund:INV-2024-000977:first",
            "booking:room-204:2026-12-06:4",
            "booking:room-311:2026-12-06:2",
            "message:C-1042:welcome",
            "message:C-1057:welcome",
        ];
        let cuts = truncate_names(&keys, 19);
        assert_eq!(
            cuts,
            [
                "…-000813:second",
                "…-2024-000977:first",
                "…-204:2026-12-06:4",
                "…-311:2026-12-06:2",
                "…:C-1042:welcome",
                "…:C-1057:welcome",
            ]
        );
        // What all share goes first: the run every demo key ends with.
        let demo = [
            "refund:INV-513:AP-42:7.024605-4-8",
            "booking:room-18:2026-12-23:7.024605-3-2",
            "refund:INV-377:AP-11:7.024605-2-15",
            "booking:room-31:2026-12-06:7.024605-1-9",
        ];
        assert_eq!(
            truncate_names(&demo, 19),
            [
                "…-513:AP-42:…-4-8",
                "…-18:…-12-23:…-3-2",
                "…-377:AP-11:…-2-15",
                "…-31:…-12-06:…-1-9"
            ]
        );
        // A key alone of its kind loses its kind and labels first: the
        // numbers name the item. Then the middle goes, keeping both ends.
        let alone = ["booking:room-204:2026-12-06:4", "message:C-1042:welcome"];
        assert_eq!(
            truncate_names(&alone, 19),
            ["…-204:2026-12-06:4", "…:C-1042:welcome"]
        );
        assert_eq!(
            truncate_names(&alone, 15),
            ["…-204:2…12-06:4", "…-1042:welcome"]
        );
        // A date's month is not an approval's number (`AP-12`): a word is
        // shared only where the parts are shaped alike.
        assert_eq!(
            truncate_names(
                &["refund:INV-417:AP-12:v1", "booking:room-204:2026-12-06:4"],
                20
            ),
            ["…:INV-417:AP-12:v1", "…-204:2026-12-06:4"]
        );
        // A holder's remark goes before any word of its name.
        assert_eq!(
            truncate_names(&["→ booking:room-204:2026-12-06:3 (12-06 14:00–16:00)"], 33),
            ["→ booking:room-204:2026-12-06:3 …"]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_never_survive() {
        let hostile = "refund:\x1b]52;c;ZXZpbA==\x07\x1b[2J\u{202E}evil\u{9b}31m";
        let safe = sanitize(hostile);
        assert!(!safe.chars().any(|c| c.is_control()), "{safe:?}");
        assert!(!safe.contains('\u{202E}'));
        assert_eq!(
            safe,
            "refund:\\u{001B}]52;c;ZXZpbA==\\u{0007}\\u{001B}[2J\\u{202E}evil\\u{009B}31m"
        );
    }

    #[test]
    fn invisible_characters_show_as_escapes() {
        assert_eq!(
            sanitize_line("hu-\u{200b}zero\u{200d}width\u{feff}-e"),
            "hu-\\u{200B}zero\\u{200D}width\\u{FEFF}-e"
        );
        // Two keys that differ by an invisible character look different.
        assert_ne!(sanitize("refund:42"), sanitize("refund:\u{2060}42"));
        assert_eq!(sanitize("tag\u{E0041}"), "tag\\u{E0041}");
        assert_eq!(sanitize("a\nb\tc\rd"), "a\nb\tc\\u{000D}d");
        // Visible text, however exotic, stays as it is.
        for visible in ["ä €", "日本語", "👍", "\u{00A0}", "a\\u{200B}"] {
            assert_eq!(sanitize(visible), visible);
        }
    }

    #[test]
    fn every_format_character_is_escaped() {
        // Unicode's Cf category, written out so a change in the table shows.
        let format_characters = [
            (0x00AD, 0x00AD),
            (0x0600, 0x0605),
            (0x061C, 0x061C),
            (0x06DD, 0x06DD),
            (0x070F, 0x070F),
            (0x0890, 0x0891),
            (0x08E2, 0x08E2),
            (0x180E, 0x180E),
            (0x200B, 0x200F),
            (0x202A, 0x202E),
            (0x2060, 0x2064),
            (0x2066, 0x206F),
            (0xFEFF, 0xFEFF),
            (0xFFF9, 0xFFFB),
            (0x110BD, 0x110BD),
            (0x110CD, 0x110CD),
            (0x13430, 0x1343F),
            (0x1BCA0, 0x1BCA3),
            (0x1D173, 0x1D17A),
            (0xE0001, 0xE0001),
            (0xE0020, 0xE007F),
        ];
        for (first, last) in format_characters {
            for code in first..=last {
                let ch = char::from_u32(code).unwrap();
                assert_eq!(
                    sanitize(&ch.to_string()),
                    format!("\\u{{{code:04X}}}"),
                    "U+{code:04X}"
                );
            }
        }
        for code in (0..0x20).chain(0x7F..0xA0) {
            let ch = char::from_u32(code).unwrap();
            if ch != '\n' && ch != '\t' {
                assert_eq!(sanitize(&ch.to_string()), format!("\\u{{{code:04X}}}"));
            }
        }
    }

    #[test]
    fn json_escapes_what_a_terminal_would_obey() {
        let value = serde_json::json!({ "key": "a\u{9b}2J\u{202E}b\u{200B}c\u{E0041}" });
        let text = safe_json(&value);
        assert!(
            text.contains("\\u009b") && text.contains("\\u202e") && text.contains("\\u200b"),
            "{text}"
        );
        assert!(text.contains("\\udb40\\udc41"), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn lines_fold_newlines() {
        assert_eq!(sanitize_line("a\nb\tc\r"), "a b c ");
    }

    #[test]
    fn keys_keep_their_distinguishing_end() {
        assert_eq!(
            truncate_middle("refund:INV-402:AP-91:v1", 13),
            "refund…-91:v1"
        );
        assert_eq!(truncate_middle("short", 13), "short");
        assert_eq!(truncate_middle("abcdef", 4), "abc…");
    }

    #[test]
    fn messages_keep_the_ends_of_long_words() {
        let key = format!("start-{}-end", "x".repeat(131_000));
        let line = message_line(&format!("no effect with key {key}: check it\nnow"));
        assert!(line.chars().count() <= 200, "{line}");
        assert!(line.starts_with("no effect with key start-x"), "{line}");
        assert!(line.ends_with("xx-end: check it now"), "{line}");
        assert!(line.contains('…'));
        let many = vec!["word"; 400].join(" ");
        let line = message_line(&many);
        assert_eq!(line.chars().count(), 1000);
        assert!(line.starts_with("word word") && line.ends_with("word word"));
        assert_eq!(message_line("short \u{1b}[2J"), "short \\u{001B}[2J");
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(truncate("abc", 0), "");
    }
}
