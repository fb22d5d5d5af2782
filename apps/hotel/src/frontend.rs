//! `hotel-frontend`: the entry of the hotel workload's operations (DeathStarBench's frontend
//! HTTP handlers `/hotels` and `/reservation`).
//!
//! - `op=search_nearby&lat=<deg>&lon=<deg>&in=<date>&out=<date>[&locale=<token>]`:
//!   `hotel-search` (sync), then `hotel-reservation` availability of one room and
//!   `hotel-profile` of the hotels found, both started at once (async) and awaited. Response
//!   `hotels=<n>`, then one profile line with `&rate=<price>` per available hotel, cheapest
//!   first. (The original asks for the profiles after the availability; starting both at once
//!   is this port's change.)
//! - `op=make_reservation&user=<name>&password=<text>&hotel=<id>&in=<date>&out=<date>&rooms=<n>`:
//!   `hotel-user` (sync), then `hotel-reservation` (sync). Response the reservation's
//!   (`reservation=ok&...` or `reservation=unavailable&...`), or
//!   `reservation=denied&user=<name>` for a wrong password.

use core::fmt::Write;
use fjord_app_kit::{Bytes, Env, IdList, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field, field_u64, lines};

use crate::data::Cents;
use crate::date::Stay;
use crate::geo::{self, MAX_RESULTS};
use crate::reservation::MAX_ROOMS;

/// Serves one `hotel-frontend` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    match args::need(rec, "op")? {
        b"search_nearby" => search_nearby(env, rec, resp),
        b"make_reservation" => make_reservation(env, rec, resp),
        _ => Err(FnError::BadRequest),
    }
}

fn search_nearby<E: Env>(env: &mut E, rec: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let (lat, lon) = geo::point(rec)?;
    let stay = Stay::from_record(rec)?;
    let locale = match field(rec, "locale") {
        Some(l) => args::token(l)?,
        None => "en",
    };
    let found = env.call("hotel-search", SMALL, |w| {
        write!(w, "lat={lat}&lon={lon}&{stay}")
    })?;
    let mut ids = IdList::<MAX_RESULTS>::new();
    let mut rates = [0u64; MAX_RESULTS];
    for (line, rate) in lines(found.bytes()).zip(&mut rates) {
        ids.push(field_u64(line, "hotel").ok_or(FnError::Failed)?);
        *rate = field_u64(line, "rate").ok_or(FnError::Failed)?;
    }
    let mut w = Writer::new(resp);
    if ids.is_empty() {
        let _ = writeln!(w, "hotels=0");
        return w.finish();
    }
    let check = env.start("hotel-reservation", SMALL, |w| {
        write!(w, "op=check&hotels={ids}&{stay}&rooms=1")
    })?;
    let profiles = env.start("hotel-profile", SMALL, |w| {
        write!(w, "hotels={ids}&locale={locale}")
    })?;
    let check = env.wait(check)?;
    let profiles = env.wait(profiles)?;
    let free = field(check.bytes(), "hotels")
        .and_then(IdList::<MAX_RESULTS>::parse)
        .ok_or(FnError::Failed)?;
    let _ = writeln!(w, "hotels={}", free.len());
    for (&id, &rate) in ids.as_slice().iter().zip(&rates) {
        if !free.contains(id) {
            continue;
        }
        let line = lines(profiles.bytes())
            .find(|l| field_u64(l, "hotel") == Some(id))
            .ok_or(FnError::Failed)?;
        let _ = w.bytes(line);
        let _ = writeln!(w, "&rate={}", Cents(rate));
    }
    w.finish()
}

fn make_reservation<E: Env>(env: &mut E, rec: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let user = args::need_token(rec, "user")?;
    let password = args::need(rec, "password")?;
    let hotel = args::need_u64(rec, "hotel")?;
    let stay = Stay::from_record(rec)?;
    let rooms = args::need_in(rec, "rooms", 1..=MAX_ROOMS)?;
    let auth = env.call("hotel-user", SMALL, |w| {
        write!(w, "user={user}&password=")?;
        w.bytes(password)
    })?;
    let mut w = Writer::new(resp);
    if field(auth.bytes(), "auth") != Some(b"ok") {
        let _ = write!(w, "reservation=denied&user={user}");
        return w.finish();
    }
    let booked = env.call("hotel-reservation", SMALL, |w| {
        write!(
            w,
            "op=make&customer={user}&hotel={hotel}&{stay}&rooms={rooms}"
        )
    })?;
    let _ = w.bytes(booked.bytes());
    w.finish()
}
