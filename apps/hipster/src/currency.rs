//! `hipster-currency`: currency conversion (Online Boutique's currency service).
//!
//! - `op=convert&to=<code>&amounts=<money,...>`: response `amounts=<money,...>`, each
//!   converted (the original converts one amount per call; a list serves both per-item calls
//!   and a whole cart at once);
//! - `op=currencies`: response `currencies=<code,...>` (`GetSupportedCurrencies`).

use core::fmt::Write;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::money::{Code, Money, RATES};

/// Most amounts one request may convert.
pub const MAX_AMOUNTS: usize = 16;

/// Serves one `hipster-currency` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let mut w = Writer::new(resp);
    match args::need(rec, "op")? {
        b"convert" => {
            let to = Code::parse(args::need(rec, "to")?).ok_or(FnError::BadRequest)?;
            let amounts = args::need(rec, "amounts")?;
            if args::items(amounts).count() > MAX_AMOUNTS {
                return Err(FnError::BadRequest);
            }
            let _ = w.bytes(b"amounts=");
            for (i, a) in args::items(amounts).enumerate() {
                let m = Money::parse(a)
                    .and_then(|m| m.convert(to))
                    .ok_or(FnError::BadRequest)?;
                let _ = write!(w, "{}{m}", if i > 0 { "," } else { "" });
            }
        }
        b"currencies" => {
            let _ = w.bytes(b"currencies=");
            for (i, (code, _)) in RATES.iter().enumerate() {
                let _ = write!(w, "{}{code}", if i > 0 { "," } else { "" });
            }
        }
        _ => return Err(FnError::BadRequest),
    }
    w.finish()
}
