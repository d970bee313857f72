//! How amounts and durations read, the same in the CLI and the console.
//! Money stays in integer minor units; only its display has a decimal point.

/// Digits after the decimal point in a currency's minor unit (ISO 4217).
pub fn minor_digits(currency: &str) -> u32 {
    match currency {
        "BIF" | "CLP" | "DJF" | "GNF" | "ISK" | "JPY" | "KMF" | "KRW" | "PYG" | "RWF" | "UGX"
        | "UYI" | "VND" | "VUV" | "XAF" | "XOF" | "XPF" => 0,
        "BHD" | "IQD" | "JOD" | "KWD" | "LYD" | "OMR" | "TND" => 3,
        _ => 2,
    }
}

/// `1500, "EUR"` reads `15.00 EUR`; computed with integers only.
pub fn money(amount_minor: i64, currency: &str) -> String {
    let digits = minor_digits(currency);
    if digits == 0 {
        return format!("{amount_minor} {currency}");
    }
    let scale = 10_i64.pow(digits);
    let sign = if amount_minor < 0 { "-" } else { "" };
    let magnitude = amount_minor.unsigned_abs();
    let scale = scale as u64;
    format!(
        "{sign}{}.{:0width$} {currency}",
        magnitude / scale,
        magnitude % scale,
        width = digits as usize
    )
}

pub fn optional_money(amount_minor: Option<i64>, currency: Option<&str>) -> String {
    match (amount_minor, currency) {
        (Some(amount), Some(currency)) => money(amount, currency),
        _ => "—".to_string(),
    }
}

/// A short age: `45s`, `3m12s`, `2h05m`, `3d04h`.
pub fn duration_ms(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let secs = ms.unsigned_abs() / 1000;
    let text = match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..=86_399 => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
        _ => format!("{}d{:02}h", secs / 86_400, (secs % 86_400) / 3600),
    };
    format!("{sign}{text}")
}

/// `1 effect`, `3 effects`: a count with its noun, singular for one.
pub fn count_of(count: usize, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

/// What the duplicates pane and `list duplicates` say of the keys they
/// count without listing.
pub fn replays_not_listed(count: i64) -> String {
    format!(
        "{} not listed",
        count_of(
            count.max(0) as usize,
            "key only replayed",
            "keys only replayed"
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_uses_the_currency_exponent() {
        assert_eq!(money(1500, "EUR"), "15.00 EUR");
        assert_eq!(money(-5, "USD"), "-0.05 USD");
        assert_eq!(money(1500, "JPY"), "1500 JPY");
        assert_eq!(money(1234, "KWD"), "1.234 KWD");
        assert_eq!(money(i64::MIN, "EUR"), "-92233720368547758.08 EUR");
    }

    #[test]
    fn durations_read_short() {
        assert_eq!(duration_ms(45_000), "45s");
        assert_eq!(duration_ms(192_000), "3m12s");
        assert_eq!(duration_ms(7_500_000), "2h05m");
        assert_eq!(duration_ms(-3_000), "-3s");
        assert_eq!(duration_ms(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    }
}
