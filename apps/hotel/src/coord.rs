//! Coordinates in micro-degrees and distances on the earth, in integer arithmetic (function
//! code avoids floating point).

use core::fmt;

/// Metres per degree of latitude (mean earth radius 6 371 km).
const METRES_PER_DEGREE: i64 = 111_195;
/// Scale of the fixed-point cosine.
const COS_ONE: i64 = 1 << 16;

/// An angle in millionths of a degree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Micro(pub i64);

impl Micro {
    /// Parses a decimal angle (`-122.4112`, at most 6 decimals) of magnitude at most `max`
    /// degrees.
    pub fn parse(text: &[u8], max: i64) -> Option<Micro> {
        let (neg, digits) = match text.strip_prefix(b"-") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (int, frac) = match digits.iter().position(|&c| c == b'.') {
            Some(p) => (&digits[..p], &digits[p + 1..]),
            None => (digits, &b""[..]),
        };
        if int.is_empty() || int.len() > 3 || frac.len() > 6 {
            return None;
        }
        let mut v = 0i64;
        for &c in int.iter().chain(frac) {
            v = v * 10 + i64::from(c.is_ascii_digit().then(|| c - b'0')?);
        }
        v *= 10i64.pow(6 - frac.len() as u32);
        (v <= max * 1_000_000).then_some(Micro(if neg { -v } else { v }))
    }
}

impl fmt::Display for Micro {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let a = self.0.unsigned_abs();
        write!(f, "{sign}{}.{:06}", a / 1_000_000, a % 1_000_000)
    }
}

/// `cos(lat)` scaled by 2^16, by Bhaskara I's approximation (error below 0.2 %):
/// `cos x ≈ (32400 − 4x²) / (32400 + x²)` for `x` in degrees.
pub fn cos_fixed(lat: Micro) -> i64 {
    let x = i128::from(lat.0.clamp(-90_000_000, 90_000_000));
    let x2 = x * x; // micro-degrees squared: 10^12 per square degree
    let full = 32_400i128 * 1_000_000_000_000;
    ((full - 4 * x2) * i128::from(COS_ONE) / (full + x2)) as i64
}

/// The distance in metres between two points, by the equirectangular approximation (good to
/// well under 1 % at city scale).
pub fn distance_m(lat1: Micro, lon1: Micro, lat2: Micro, lon2: Micro) -> u64 {
    let mid = Micro((lat1.0 + lat2.0) / 2);
    let dy = (lat2.0 - lat1.0) * METRES_PER_DEGREE / 1_000_000;
    let dx = (lon2.0 - lon1.0) * METRES_PER_DEGREE / 1_000_000 * cos_fixed(mid) / COS_ONE;
    (dx * dx + dy * dy).unsigned_abs().isqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn parses_and_prints() {
        assert_eq!(Micro::parse(b"37.7867", 90), Some(Micro(37_786_700)));
        assert_eq!(Micro::parse(b"-122.4112", 180), Some(Micro(-122_411_200)));
        assert_eq!(Micro::parse(b"5", 90), Some(Micro(5_000_000)));
        assert_eq!(Micro(-122_411_200).to_string(), "-122.411200");
        for bad in [
            &b"91"[..],
            b"",
            b"-",
            b"1.2345678",
            b"1e3",
            b".5",
            b"1000",
            b"--1",
        ] {
            assert!(Micro::parse(bad, 90).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn cosine_is_close() {
        assert_eq!(cos_fixed(Micro(0)), COS_ONE);
        // cos 37.7867° = 0.79044
        let c = cos_fixed(Micro(37_786_700));
        assert!((c - 51_802).abs() < 120, "{c}");
        assert!(cos_fixed(Micro(90_000_000)) < 10);
    }

    #[test]
    fn distances_match_haversine() {
        // Clift Hotel to W San Francisco: 951 m by the haversine formula.
        let d = distance_m(
            Micro(37_786_700),
            Micro(-122_411_200),
            Micro(37_785_400),
            Micro(-122_400_500),
        );
        assert!((945..=957).contains(&d), "{d}");
        assert_eq!(distance_m(Micro(1), Micro(2), Micro(1), Micro(2)), 0);
        // One degree of latitude.
        let d = distance_m(Micro(0), Micro(0), Micro(1_000_000), Micro(0));
        assert_eq!(d, 111_195);
    }
}
