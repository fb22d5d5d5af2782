//! `social-user`: user names to ids (DeathStarBench's user service `GetUserId` and the
//! user-mention service's lookup).
//!
//! Request `names=<name,...>` (at most [`MAX_USERS`](crate::data::MAX_USERS)); response one
//! line `name=<name>&user=<id>` per registered name, in request order (unknown names are left
//! out, as the mention service ignores them).

use core::fmt::Write;
use fjord_app_kit::{Env, args};
use fjord_libos::function::FnError;
use fjord_libos::text::Writer;

use crate::data::{MAX_USERS, user_id};

/// Serves one `social-user` request.
pub fn serve<E: Env>(_env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let names = args::need(rec, "names")?;
    if args::items(names).count() > MAX_USERS {
        return Err(FnError::BadRequest);
    }
    let mut w = Writer::new(resp);
    for name in args::items(names) {
        let name = args::token(name)?;
        if let Some(id) = user_id(name.as_bytes()) {
            let _ = writeln!(w, "name={name}&user={id}");
        }
    }
    w.finish()
}
