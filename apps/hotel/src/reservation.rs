//! `hotel-reservation`: room availability and bookings (DeathStarBench's reservation service).
//!
//! The rooms booked per hotel and night live in the key-value store under
//! `hotel/rsv/<hotel>/<day number>`; a customer's latest booking under
//! `hotel/last/<customer>`. Requests:
//! - `op=check&hotels=<id,...>&in=<date>&out=<date>&rooms=<n>`: response
//!   `hotels=<id,...>`, those with `n` rooms free every night;
//! - `op=make&customer=<name>&hotel=<id>&in=<date>&out=<date>&rooms=<n>`: books the rooms if
//!   every night has them; response `reservation=ok&hotel=<id>&in=..&out=..&rooms=<n>` or
//!   `reservation=unavailable&hotel=<id>` (a full hotel is an answer, not an error).
//!
//! The check-then-book is not atomic (the original holds a lock around it); concurrent
//! bookings may overbook a night.

use core::fmt::Write;
use fjord_app_kit::store::{self, Key};
use fjord_app_kit::{Env, IdList, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::data::{Hotel, hotel_by_id};
use crate::date::{Date, Stay};
use crate::rate::MAX_HOTELS;

/// Most rooms one booking may take.
pub const MAX_ROOMS: u64 = 10;

fn night_key(hotel: u64, night: Date) -> Result<Key, FnError> {
    Key::new(format_args!("hotel/rsv/{hotel}/{}", night.0))
}

/// Whether `hotel` has `rooms` free on every night of `stay`.
pub fn available<E: Env>(
    env: &mut E,
    hotel: &Hotel,
    stay: &Stay,
    rooms: u64,
) -> Result<bool, FnError> {
    for night in stay.nights() {
        if store::get_u64(env, &night_key(hotel.id, night)?)? + rooms > hotel.capacity {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Books `rooms` at `hotel` for `stay` if available; whether it did.
pub fn book<E: Env>(env: &mut E, hotel: &Hotel, stay: &Stay, rooms: u64) -> Result<bool, FnError> {
    if !available(env, hotel, stay, rooms)? {
        return Ok(false);
    }
    for night in stay.nights() {
        let key = night_key(hotel.id, night)?;
        let booked = store::get_u64(env, &key)?;
        store::put_u64(env, &key, booked + rooms)?;
    }
    Ok(true)
}

/// Serves one `hotel-reservation` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let stay = Stay::from_record(rec)?;
    let rooms = args::need_in(rec, "rooms", 1..=MAX_ROOMS)?;
    let mut w = Writer::new(resp);
    match args::need(rec, "op")? {
        b"check" => {
            let hotels = IdList::<MAX_HOTELS>::parse(args::need(rec, "hotels")?)
                .ok_or(FnError::BadRequest)?;
            let mut free = IdList::<MAX_HOTELS>::new();
            for &id in hotels.as_slice() {
                let hotel = hotel_by_id(id).ok_or(FnError::BadRequest)?;
                if available(env, hotel, &stay, rooms)? {
                    free.push(id);
                }
            }
            let _ = write!(w, "hotels={free}");
        }
        b"make" => {
            let customer = args::need_token(rec, "customer")?;
            let hotel = hotel_by_id(args::need_u64(rec, "hotel")?).ok_or(FnError::BadRequest)?;
            if book(env, hotel, &stay, rooms)? {
                let _ = write!(w, "reservation=ok&hotel={}&{stay}&rooms={rooms}", hotel.id);
                let key = Key::new(format_args!("hotel/last/{customer}"))?;
                env.kv_put(key.as_bytes(), w.written())?;
            } else {
                let _ = write!(w, "reservation=unavailable&hotel={}", hotel.id);
            }
        }
        _ => return Err(FnError::BadRequest),
    }
    w.finish()
}
