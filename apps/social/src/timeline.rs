//! `social-timeline`: user and home timelines (DeathStarBench's user-timeline and
//! home-timeline services).
//!
//! Timelines are the newest [`TIMELINE`] post ids, newest first, under `social/utl/<id>` (the
//! user's own posts) and `social/htl/<id>` (posts of whom they follow, and mentioning them).
//! Requests:
//! - `op=write&post=<id>&user=<id>&mentions=<id,...>`: adds the post to the author's user
//!   timeline, asks `social-graph` (sync) for the author's followers, and adds it to their
//!   and the mentioned users' home timelines; response `post=<id>&home=<n>` (home timelines
//!   written);
//! - `op=read&user=<id>&kind=home|user`: response `user=<id>&posts=<id,...>`.

use core::fmt::Write;
use fjord_app_kit::store::{self, Key};
use fjord_app_kit::{Bytes, Env, IdList, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field};

use crate::data::{MAX_USERS, is_user};
use crate::graph::Users;

/// Posts kept per timeline.
pub const TIMELINE: usize = 16;

/// A timeline.
pub type Timeline = IdList<TIMELINE>;

fn key(kind: &str, user: u64) -> Result<Key, FnError> {
    Key::new(format_args!("social/{kind}/{user}"))
}

fn prepend<E: Env>(env: &mut E, kind: &str, user: u64, post: u64) -> Result<(), FnError> {
    let key = key(kind, user)?;
    let mut t: Timeline = store::get_list(env, &key)?.unwrap_or_default();
    t.push_front(post);
    store::put_list(env, &key, &t)
}

fn user_field(rec: &[u8]) -> Result<u64, FnError> {
    let user = args::need_u64(rec, "user")?;
    if is_user(user) {
        Ok(user)
    } else {
        Err(FnError::BadRequest)
    }
}

/// Serves one `social-timeline` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let user = user_field(rec)?;
    let mut w = Writer::new(resp);
    match args::need(rec, "op")? {
        b"write" => {
            let post = args::need_u64(rec, "post")?;
            let mut readers = field(rec, "mentions")
                .and_then(IdList::<{ 2 * MAX_USERS }>::parse)
                .ok_or(FnError::BadRequest)?;
            if readers.as_slice().iter().any(|&u| !is_user(u)) {
                return Err(FnError::BadRequest);
            }
            prepend(env, "utl", user, post)?;
            let reply = env.call("social-graph", SMALL, |w| {
                write!(w, "op=followers&user={user}")
            })?;
            let followers = field(reply.bytes(), "followers")
                .and_then(Users::parse)
                .ok_or(FnError::Failed)?;
            for &f in followers.as_slice() {
                readers.insert(f);
            }
            for &r in readers.as_slice() {
                prepend(env, "htl", r, post)?;
            }
            let _ = write!(w, "post={post}&home={}", readers.len());
        }
        b"read" => {
            let kind = match args::need(rec, "kind")? {
                b"home" => "htl",
                b"user" => "utl",
                _ => return Err(FnError::BadRequest),
            };
            let t: Timeline = store::get_list(env, &key(kind, user)?)?.unwrap_or_default();
            let _ = write!(w, "user={user}&posts={t}");
        }
        _ => return Err(FnError::BadRequest),
    }
    w.finish()
}
