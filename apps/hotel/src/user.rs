//! `hotel-user`: checks a user's password (DeathStarBench's user service `CheckUser`).
//!
//! Request `user=<name>&password=<text>`; response `user=<name>&auth=ok` or
//! `user=<name>&auth=denied` (unknown user or wrong password).

use core::fmt::Write;
use fjord_app_kit::hash::fnv1a64;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::data::USERS;

/// Whether `password` is `name`'s.
pub fn check(name: &str, password: &[u8]) -> bool {
    let hash = fnv1a64(password);
    USERS
        .iter()
        .any(|u| u.name == name && u.password_hash == hash)
}

/// Serves one `hotel-user` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let name = args::need_token(rec, "user")?;
    let password = args::need(rec, "password")?;
    if password.len() > args::MAX_TOKEN {
        return Err(FnError::BadRequest);
    }
    let verdict = if check(name, password) {
        "ok"
    } else {
        "denied"
    };
    let mut w = Writer::new(resp);
    let _ = write!(w, "user={name}&auth={verdict}");
    w.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_checked() {
        assert!(super::check("Cornell_1", b"1111111111"));
        assert!(!super::check("Cornell_1", b"2222222222"));
        assert!(!super::check("nobody", b"1111111111"));
    }
}
