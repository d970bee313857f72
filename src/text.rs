//! Untrusted text from the ledger (keys, targets, params, provider messages)
//! made safe for a terminal: no control characters, escape sequences or
//! bidi overrides ever reach it, whoever wrote the row.

/// Replaces every character that could move the cursor, change colours,
/// talk to the terminal (ESC, CSI, OSC, DCS…) or reorder text (bidi
/// controls) with a visible stand-in, keeping all other text as it is.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if is_dangerous(ch) {
            out.push('\u{FFFD}');
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

fn is_dangerous(ch: char) -> bool {
    if ch == '\n' || ch == '\t' {
        return false;
    }
    ch.is_control()
        || matches!(ch,
            '\u{200E}' | '\u{200F}'            // left-to-right / right-to-left marks
            | '\u{202A}'..='\u{202E}'          // embeddings and overrides
            | '\u{2066}'..='\u{2069}'          // isolates
            | '\u{061C}'                       // Arabic letter mark
            | '\u{FEFF}'                       // zero-width no-break space
        )
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

/// JSON for a terminal or a pipe: dangerous characters inside strings are
/// written as `\uXXXX` escapes, which every JSON reader decodes back.
pub fn safe_json(value: &impl serde::Serialize) -> String {
    let raw = serde_json::to_string_pretty(value).unwrap_or_else(|error| {
        serde_json::json!({ "error": format!("cannot encode as JSON: {error}") }).to_string()
    });
    let mut out = String::with_capacity(raw.len());
    for ch in raw.chars() {
        if is_dangerous(ch) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_never_survive() {
        let hostile = "refund:\x1b]52;c;ZXZpbA==\x07\x1b[2J\u{202E}evil\u{9b}31m";
        let safe = sanitize(hostile);
        assert!(!safe.chars().any(|c| c.is_control()), "{safe:?}");
        assert!(!safe.contains('\u{202E}'));
        assert!(safe.starts_with("refund:"));
        assert!(safe.contains("evil"));
    }

    #[test]
    fn json_escapes_what_a_terminal_would_obey() {
        let value = serde_json::json!({ "key": "a\u{9b}2J\u{202E}b" });
        let text = safe_json(&value);
        assert!(
            text.contains("\\u009b") && text.contains("\\u202e"),
            "{text}"
        );
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
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(truncate("abc", 0), "");
    }
}
