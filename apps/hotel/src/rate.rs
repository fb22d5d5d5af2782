//! `hotel-rate`: the rate plans of some hotels for a stay (DeathStarBench's rate service).
//!
//! Request `hotels=<id,...>&in=<date>&out=<date>`; response one line
//! `hotel=<id>&plan=<code>&room=<code>&desc=<text>&total=<cents>&inclusive=<cents>` per plan
//! that covers every night of the stay, cheapest first. (The original returns every plan of
//! the hotels, most expensive first; filtering by the stay is this port's addition.)

use core::fmt::Write;
use fjord_app_kit::{Env, IdList, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::data::{RATE_PLANS, RatePlan, hotel_by_id};
use crate::date::Stay;

/// Most hotels one request may name.
pub const MAX_HOTELS: usize = 16;

/// The plans of `hotels` that cover `stay`, cheapest first (ties by hotel id); their count.
pub fn plans_for(
    hotels: &[u64],
    stay: &Stay,
) -> ([Option<&'static RatePlan>; RATE_PLANS.len()], usize) {
    let mut out = [None; RATE_PLANS.len()];
    let mut n = 0;
    for p in RATE_PLANS {
        if hotels.contains(&p.hotel) && p.from <= stay.check_in && stay.check_out <= p.to {
            out[n] = Some(p);
            n += 1;
        }
    }
    out[..n].sort_unstable_by_key(|p| p.map(|p| (p.total, p.hotel)));
    (out, n)
}

/// Serves one `hotel-rate` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let hotels =
        IdList::<MAX_HOTELS>::parse(args::need(rec, "hotels")?).ok_or(FnError::BadRequest)?;
    if hotels
        .as_slice()
        .iter()
        .any(|&id| hotel_by_id(id).is_none())
    {
        return Err(FnError::BadRequest);
    }
    let stay = Stay::from_record(rec)?;
    let (plans, n) = plans_for(hotels.as_slice(), &stay);
    let mut w = Writer::new(resp);
    for p in plans[..n].iter().flatten() {
        let _ = writeln!(
            w,
            "hotel={}&plan={}&room={}&desc={}&total={}&inclusive={}",
            p.hotel, p.code, p.room, p.description, p.total, p.inclusive
        );
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::date::Date;

    fn stay(a: (i64, i64, i64), b: (i64, i64, i64)) -> Stay {
        Stay {
            check_in: Date::ymd(a.0, a.1, a.2),
            check_out: Date::ymd(b.0, b.1, b.2),
        }
    }

    #[test]
    fn filters_by_stay_and_sorts_by_price() {
        let (plans, n) = plans_for(&[1, 2, 3, 5, 6], &stay((2015, 4, 9), (2015, 4, 10)));
        let got: std::vec::Vec<_> = plans[..n]
            .iter()
            .flatten()
            .map(|p| (p.hotel, p.code))
            .collect();
        assert_eq!(
            got,
            [
                (1, "PROMO"),
                (1, "RACK"),
                (3, "RACK"),
                (5, "RACK"),
                (2, "RACK")
            ]
        );
        // The promotion ends on the 15th; the summer plan starts in May.
        let (plans, n) = plans_for(&[1, 6], &stay((2015, 4, 14), (2015, 4, 16)));
        assert_eq!(
            plans[..n]
                .iter()
                .flatten()
                .map(|p| p.code)
                .collect::<std::vec::Vec<_>>(),
            ["RACK"]
        );
        assert_eq!(plans_for(&[6], &stay((2015, 5, 2), (2015, 5, 4))).1, 1);
    }
}
