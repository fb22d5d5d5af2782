//! `hotel-search`: hotels near a point that have a rate for a stay (DeathStarBench's search
//! service: `geo.Nearby`, then `rate.GetRates` on the hotels found).
//!
//! Request `lat=<deg>&lon=<deg>&in=<date>&out=<date>`; response one line
//! `hotel=<id>&rate=<cents>&plan=<code>` per hotel with a plan, cheapest first.
//!
//! Calls (each needs the previous one's result): `hotel-geo`, then `hotel-rate`.

use core::fmt::Write;
use fjord_app_kit::{Bytes, Env, IdList, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field, field_u64, lines};

use crate::date::Stay;
use crate::geo::{self, MAX_RESULTS};

/// Serves one `hotel-search` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let (lat, lon) = geo::point(rec)?;
    let stay = Stay::from_record(rec)?;
    let near = env.call("hotel-geo", SMALL, |w| write!(w, "lat={lat}&lon={lon}"))?;
    let mut ids = IdList::<MAX_RESULTS>::new();
    for line in lines(near.bytes()) {
        ids.push(field_u64(line, "hotel").ok_or(FnError::Failed)?);
    }
    let mut w = Writer::new(resp);
    if ids.is_empty() {
        return w.finish();
    }
    let rates = env.call("hotel-rate", SMALL, |w| write!(w, "hotels={ids}&{stay}"))?;
    let mut listed = IdList::<MAX_RESULTS>::new();
    for line in lines(rates.bytes()) {
        let hotel = field_u64(line, "hotel").ok_or(FnError::Failed)?;
        let total = field_u64(line, "total").ok_or(FnError::Failed)?;
        let plan = field(line, "plan").ok_or(FnError::Failed)?;
        // Plans come cheapest first: keep each hotel's first.
        if !listed.contains(hotel) && listed.push(hotel) {
            let _ = write!(w, "hotel={hotel}&rate={total}&plan=");
            let _ = w.bytes(plan);
            let _ = writeln!(w);
        }
    }
    w.finish()
}
