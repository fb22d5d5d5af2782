//! `hotel-profile`: hotel profiles (DeathStarBench's profile service).
//!
//! Request `hotels=<id,...>&locale=<token>` (the locale is accepted and, as in the original,
//! ignored); response one line
//! `hotel=<id>&name=<text>&phone=<text>&address=<text>&lat=<deg>&lon=<deg>` per hotel, in
//! request order.

use core::fmt::Write;
use fjord_app_kit::{Env, IdList, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field};

use crate::data::hotel_by_id;
use crate::rate::MAX_HOTELS;

/// Serves one `hotel-profile` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let hotels =
        IdList::<MAX_HOTELS>::parse(args::need(rec, "hotels")?).ok_or(FnError::BadRequest)?;
    if let Some(locale) = field(rec, "locale") {
        args::token(locale)?;
    }
    let mut w = Writer::new(resp);
    for &id in hotels.as_slice() {
        let h = hotel_by_id(id).ok_or(FnError::BadRequest)?;
        let _ = writeln!(
            w,
            "hotel={}&name={}&phone={}&address={}&lat={}&lon={}",
            h.id, h.name, h.phone, h.address, h.lat, h.lon
        );
    }
    w.finish()
}
