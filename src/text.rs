//! The text of durations, ages and times, as the flags, logs, Events and `status` write
//! them. Pure functions, no I/O: table-tested here.

use std::time::Duration;

/// `500ms`, `3s`, `1.5s`, `2m`, `2h`: as the flags are written.
pub fn duration(d: Duration) -> String {
    let (secs, millis) = (d.as_secs(), d.subsec_millis());
    match (secs, millis) {
        (0, ms) => format!("{ms}ms"),
        (s, 0) if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        (s, 0) if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        _ => format!("{}s", (d.as_secs_f64() * 1000.0).round() / 1000.0),
    }
}

/// kubectl's short ages: `45s`, `3m20s`, `12m`, `5h3m`, `20h`, `3d4h`, `12d`, `2y40d`.
pub fn age(secs: u64) -> String {
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        if secs.is_multiple_of(60) {
            format!("{m}m")
        } else {
            format!("{m}m{}s", secs % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m.is_multiple_of(60) {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h.is_multiple_of(24) {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        let y = d / 365;
        if d.is_multiple_of(365) {
            format!("{y}y")
        } else {
            format!("{y}y{}d", d % 365)
        }
    } else {
        format!("{}y", d / 365)
    }
}

/// `12m`, `1h5m`: a wait or an age given as a `Duration`, as `status` and the logs show it.
pub fn age_of(d: Duration) -> String {
    age(d.as_secs())
}

/// `512 B`, `64 KiB`, `4.0 MiB`: a size, as the logs write a cap.
pub fn bytes(n: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    if n >= MIB {
        format!("{:.1} MiB", n as f64 / MIB as f64)
    } else if n >= KIB {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} B")
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as k8s-openapi writes a `Time` (whole seconds, UTC); empty after
/// the year 9999.
pub fn rfc3339_seconds(secs: u64) -> String {
    let Some(text) = rfc3339_micros(secs, 0) else {
        return String::new();
    };
    let mut out = String::with_capacity(20);
    // The digits and separators are ASCII.
    out.extend(text[..19].iter().map(|&b| char::from(b)));
    out.push('Z');
    out
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` for `secs` after the Unix epoch (years up to 9999).
pub fn rfc3339_micros(secs: u64, micros: u32) -> Option<[u8; 27]> {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Days to the civil date (Howard Hinnant's `civil_from_days`, for days ≥ 0).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    if year > 9999 {
        return None;
    }
    let mut out = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, rem / 3600);
    put(14, 2, rem % 3600 / 60);
    put(17, 2, rem % 60);
    put(20, 6, u64::from(micros));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn sizes() {
        for (n, want) in [
            (0, "0 B"),
            (1023, "1023 B"),
            (65_536, "64 KiB"),
            (4 << 20, "4.0 MiB"),
            (3 << 19, "1.5 MiB"),
        ] {
            assert_eq!(bytes(n), want, "{n}");
        }
    }

    #[test]
    fn ages_like_kubectl() {
        let cases = [
            (0, "0s"),
            (45, "45s"),
            (119, "119s"),
            (200, "3m20s"),
            (600, "10m"),
            (3 * 3600 + 120, "3h2m"),
            (20 * 3600, "20h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (12 * 86400, "12d"),
            (800 * 86400, "2y70d"),
        ];
        for (secs, want) in cases {
            assert_eq!(age(secs), want, "{secs}");
        }
    }

    /// The same text as the default timer, checked against jiff's RFC 3339 at
    /// microseconds over the whole range: leap days, ends of months and years, 1970, 9999.
    #[test]
    fn times_are_written_as_the_default_timer_writes_them() {
        let mut secs: Vec<u64> = vec![
            0,
            59,
            86_399,
            86_400,
            951_782_400,
            951_868_799,
            1_709_164_800,
            253_402_207_200,
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            secs.push(x % 253_402_207_200);
        }
        for (i, s) in secs.into_iter().enumerate() {
            let micros = (i as u32 * 7919) % 1_000_000;
            let ours = rfc3339_micros(s, micros).unwrap();
            let ts = Timestamp::new(s as i64, (micros * 1000) as i32).unwrap();
            assert_eq!(
                std::str::from_utf8(&ours).unwrap(),
                format!("{ts:.6}"),
                "{s}.{micros}"
            );
        }
        // jiff stops a day short of the end of 9999.
        assert_eq!(
            &rfc3339_micros(253_402_300_799, 999_999).unwrap(),
            b"9999-12-31T23:59:59.999999Z"
        );
        assert_eq!(rfc3339_micros(253_402_300_800, 0), None);
    }
}
