//! Percent-encoding for values put into URLs, and decoding for the fake
//! provider's own parsing.

/// Encodes everything but RFC 3986 unreserved characters, so a value is
/// always one path segment or one query value, whatever it contains.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes (and `+` as space when `plus_is_space`); invalid
/// escapes are kept as they are, invalid UTF-8 is replaced.
pub fn decode(text: &str, plus_is_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'%' if index + 2 < bytes.len() => {
                match (hex(bytes[index + 1]), hex(bytes[index + 2])) {
                    (Some(high), Some(low)) => {
                        out.push(high * 16 + low);
                        index += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' if plus_is_space => out.push(b' '),
            other => out.push(other),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).map(|digit| digit as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_hostile_values() {
        for value in ["refund:INV-1/../x?y=1&z#", "ä €", "%41", "a+b", ""] {
            assert_eq!(decode(&encode(value), false), value);
        }
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
        assert_eq!(decode("a+b%2", true), "a b%2");
        assert_eq!(decode("%zz%4", false), "%zz%4");
    }
}
