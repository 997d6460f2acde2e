//! How the store packs what it keeps of an object: a uid as 16 bytes when it is a UUID in
//! its usual form, a time as seconds since the epoch (the API server's `Time` has no
//! fraction); and back.

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};

/// A UUID as 16 bytes, if `s` is one in the canonical lower-case form (so that writing it
/// back gives `s` again).
pub(super) fn uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = b.iter().filter(|&&c| c != b'-');
    for byte in &mut out {
        let hi = hex(*digits.next()?)?;
        let lo = hex(*digits.next()?)?;
        *byte = hi << 4 | lo;
    }
    Some(out)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

pub(super) fn uuid_text(b: &[u8; 16]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(DIGITS[usize::from(byte >> 4)] as char);
        s.push(DIGITS[usize::from(byte & 15)] as char);
    }
    s
}

pub(super) fn seconds(t: Option<&Time>) -> Option<i64> {
    t.map(|t| t.0.as_second())
}

pub(super) fn time(secs: i64) -> Option<Time> {
    Timestamp::from_second(secs).ok().map(Time)
}
