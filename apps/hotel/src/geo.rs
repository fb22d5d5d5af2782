//! `hotel-geo`: the hotels nearest a point (DeathStarBench's geo service, which searches a
//! geo index for at most five hotels within 10 km).
//!
//! Request `lat=<deg>&lon=<deg>`; response one line `hotel=<id>&dist=<metres>` per hotel,
//! nearest first.

use core::fmt::Write;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::coord::{Micro, distance_m};
use crate::data::HOTELS;

/// Most hotels returned.
pub const MAX_RESULTS: usize = 5;
/// Search radius in metres.
pub const RADIUS_M: u64 = 10_000;

/// The hotels within [`RADIUS_M`] of a point, nearest first (ties by id), at most
/// [`MAX_RESULTS`]: `(distance, id)` pairs and their count.
pub fn nearest(lat: Micro, lon: Micro) -> ([(u64, u64); MAX_RESULTS], usize) {
    let mut all = [(0u64, 0u64); HOTELS.len()];
    for (slot, h) in all.iter_mut().zip(HOTELS) {
        *slot = (distance_m(lat, lon, h.lat, h.lon), h.id);
    }
    all.sort_unstable();
    let mut out = [(0, 0); MAX_RESULTS];
    let mut n = 0;
    for &(d, id) in all
        .iter()
        .take_while(|(d, _)| *d <= RADIUS_M)
        .take(MAX_RESULTS)
    {
        out[n] = (d, id);
        n += 1;
    }
    (out, n)
}

/// The point in a request's `lat` and `lon` fields.
pub fn point(rec: &[u8]) -> Result<(Micro, Micro), FnError> {
    let lat = Micro::parse(args::need(rec, "lat")?, 90).ok_or(FnError::BadRequest)?;
    let lon = Micro::parse(args::need(rec, "lon")?, 180).ok_or(FnError::BadRequest)?;
    Ok((lat, lon))
}

/// Serves one `hotel-geo` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let (lat, lon) = point(args::record(req)?)?;
    let (found, n) = nearest(lat, lon);
    let mut w = Writer::new(resp);
    for (d, id) in &found[..n] {
        let _ = writeln!(w, "hotel={id}&dist={d}");
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_by_distance_within_the_radius() {
        let (found, n) = nearest(Micro(37_786_700), Micro(-122_411_100));
        let ids: std::vec::Vec<u64> = found[..n].iter().map(|&(_, id)| id).collect();
        assert_eq!(ids, [1, 3, 5, 6, 2]);
        assert!(found[..n].windows(2).all(|w| w[0].0 <= w[1].0));
        // Far from every hotel: none.
        assert_eq!(nearest(Micro(0), Micro(0)).1, 0);
    }
}
