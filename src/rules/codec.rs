//! The shared decoders of constant folding: the escapes of Python and Bash string literals, and
//! the codecs scripts use to hide a payload (base64, base32, hex, rot13).
//!
//! Decoded bytes that are not UTF-8 map byte-for-char (Latin-1), so the text stays matchable.

use base64::Engine as _;

/// Python string escapes (non-raw literals).
pub fn decode_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let hex = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>, n: usize| {
            let digits: String = (0..n).filter_map(|_| chars.next()).collect();
            u32::from_str_radix(&digits, 16)
                .ok()
                .and_then(char::from_u32)
        };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(dg) => {
                            v = v * 8 + dg;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.extend(char::from_u32(v));
            }
            'x' => out.extend(hex(&mut chars, 2)),
            'u' => out.extend(hex(&mut chars, 4)),
            'U' => out.extend(hex(&mut chars, 8)),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\n' => {}
            '\\' | '\'' | '"' => out.push(e),
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

/// `$'…'` and printf escapes: `\xHH`, `\NNN` (octal), `\uHHHH`, `\n` and friends.
pub fn decode_c_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let digits =
            |radix: u32, max: usize, chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
                let mut v = 0u32;
                let mut n = 0;
                while n < max {
                    match chars.peek().and_then(|c| c.to_digit(radix)) {
                        Some(dg) => {
                            v = v * radix + dg;
                            chars.next();
                            n += 1;
                        }
                        None => break,
                    }
                }
                (n > 0).then(|| char::from_u32(v)).flatten()
            };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'e' | 'E' => out.push('\x1b'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            'x' => out.extend(digits(16, 2, &mut chars)),
            'u' => out.extend(digits(16, 4, &mut chars)),
            'U' => out.extend(digits(16, 8, &mut chars)),
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(dg) => {
                            v = v * 8 + dg;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.extend(char::from_u32(v));
            }
            '\\' | '\'' | '"' | '?' => out.push(e),
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

/// Bytes as text: UTF-8 when valid, else one char per byte.
fn bytes_to_string(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|e| e.into_bytes().iter().map(|&b| char::from(b)).collect())
}

/// `base64.b64decode` (or `urlsafe_b64decode`): whitespace ignored, padding optional.
pub fn decode_base64(s: &str, url_safe: bool) -> Option<String> {
    let cleaned: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let trimmed = cleaned.trim_end_matches('=');
    let engine = if url_safe {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD
    };
    engine.decode(trimmed).ok().map(bytes_to_string)
}

/// `base64.b32decode` (case-folded), padding optional.
pub fn decode_base32(s: &str) -> Option<String> {
    let upper = s.trim_end_matches('=').to_ascii_uppercase();
    data_encoding::BASE32_NOPAD
        .decode(upper.as_bytes())
        .ok()
        .map(bytes_to_string)
}

/// `bytes.fromhex` / `binascii.unhexlify`: whitespace ignored.
pub fn decode_hex(s: &str) -> Option<String> {
    let cleaned: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    hex::decode(cleaned).ok().map(bytes_to_string)
}

/// `tr SET1 SET2` of a text: each character of SET1 becomes the one at its place in SET2 (the last
/// one when SET2 is shorter). Sets are characters and `a-z` ranges; classes (`[:alpha:]`) and
/// escapes are not folded.
pub fn translate(s: &str, from: &str, to: &str) -> Option<String> {
    fn expand(set: &str) -> Option<Vec<char>> {
        if set.contains(['[', '\\']) {
            return None;
        }
        let chars: Vec<char> = set.chars().collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            if i + 2 < chars.len() && chars[i + 1] == '-' && chars[i] <= chars[i + 2] {
                out.extend(chars[i]..=chars[i + 2]);
                i += 3;
            } else {
                out.push(chars[i]);
                i += 1;
            }
        }
        (out.len() <= 1024).then_some(out)
    }
    let from = expand(from)?;
    let to = expand(to)?;
    let last = *to.last()?;
    Some(
        s.chars()
            .map(|c| match from.iter().position(|&f| f == c) {
                Some(i) => to.get(i).copied().unwrap_or(last),
                None => c,
            })
            .collect(),
    )
}

/// The `rot13` text codec.
pub fn rot13(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'a'..='z' => char::from(b'a' + (c as u8 - b'a' + 13) % 26),
            'A'..='Z' => char::from(b'A' + (c as u8 - b'A' + 13) % 26),
            _ => c,
        })
        .collect()
}

/// `codecs.decode(value, codec)` for the codecs that turn text into text.
pub fn apply_codec(value: &str, codec: &str) -> Option<String> {
    match codec.to_ascii_lowercase().replace('-', "_").as_str() {
        "rot13" | "rot_13" => Some(rot13(value)),
        "hex" | "hex_codec" => decode_hex(value),
        "base64" | "base64_codec" | "base_64" => decode_base64(value, false),
        "utf8" | "utf_8" | "ascii" | "latin1" | "latin_1" | "iso8859_1" | "unicode_escape" => {
            Some(value.to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_decode_like_python() {
        assert_eq!(decode_escapes(r"\x65\166al\u0028\n"), "eval(\n");
        assert_eq!(decode_escapes(r"a\qb"), r"a\qb");
    }

    #[test]
    fn c_escapes_decode_like_bash() {
        assert_eq!(decode_c_escapes(r"\x72\155\n"), "rm\n");
        assert_eq!(decode_c_escapes(r"\e[0m\?"), "\x1b[0m?");
    }

    #[test]
    fn codecs() {
        assert_eq!(apply_codec("riny", "rot13").as_deref(), Some("eval"));
        assert_eq!(
            translate("fx_yvir_9", "A-Za-z", "N-ZA-Mn-za-m").as_deref(),
            Some("sk_live_9")
        );
        assert_eq!(translate("abc", "a-c", "x").as_deref(), Some("xxx"));
        assert_eq!(translate("abc", "[:lower:]", "[:upper:]"), None);
        assert_eq!(apply_codec("riny", "ROT-13").as_deref(), Some("eval"));
        assert_eq!(apply_codec("x", "zlib"), None);
        assert_eq!(decode_hex("6576616c").as_deref(), Some("eval"));
        assert_eq!(decode_hex("65 76 61 6c").as_deref(), Some("eval"));
        assert_eq!(decode_hex("657"), None);
        assert_eq!(decode_hex("zz"), None);
        assert_eq!(decode_base64("ZXZhbA==", false).as_deref(), Some("eval"));
        assert_eq!(decode_base64("ZXZh\nbA", false).as_deref(), Some("eval"));
        assert_eq!(decode_base64("-_8", true).as_deref(), Some("\u{fb}\u{ff}"));
        assert_eq!(decode_base32("MV3GC3A=").as_deref(), Some("eval"));
        assert_eq!(decode_base32("mv3gc3a").as_deref(), Some("eval"));
        assert_eq!(decode_base32("M1"), None);
    }
}
