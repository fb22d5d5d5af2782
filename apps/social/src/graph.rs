//! `social-graph`: who follows whom (DeathStarBench's social-graph service).
//!
//! Lists live under `social/followers/<id>` and `social/followees/<id>`; a user without a
//! stored list has the seed graph's ([`FOLLOWS`](crate::data::FOLLOWS)). Requests:
//! - `op=followers&user=<id>`: response `user=<id>&followers=<id,...>`;
//! - `op=followees&user=<id>`: response `user=<id>&followees=<id,...>`;
//! - `op=follow&user=<name>&followee=<name>` (the original's `FollowWithUsername`): looks both
//!   names up with two `social-user` calls started at once (async), adds the edge (a no-op if
//!   present); response `follow=ok&user=<id>&followee=<id>&followers=<n>&followees=<n>`.

use core::fmt::Write;
use fjord_app_kit::store::{self, Key};
use fjord_app_kit::{Bytes, Env, IdList, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field_u64};

use crate::data::{FOLLOWS, MAX_USERS, is_user};

/// A follower or followee list.
pub type Users = IdList<MAX_USERS>;

/// Which side of the follow edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Who follows the user.
    Followers,
    /// Whom the user follows.
    Followees,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Followers => "followers",
            Side::Followees => "followees",
        }
    }
}

/// The seed graph's list of `user`.
pub fn seed(user: u64, side: Side) -> Users {
    let mut list = Users::new();
    for &(follower, followee) in FOLLOWS {
        match side {
            Side::Followers if followee == user => list.push(follower),
            Side::Followees if follower == user => list.push(followee),
            _ => true,
        };
    }
    list
}

fn key(user: u64, side: Side) -> Result<Key, FnError> {
    Key::new(format_args!("social/{}/{user}", side.name()))
}

/// The current list of `user`.
pub fn list<E: Env>(env: &mut E, user: u64, side: Side) -> Result<Users, FnError> {
    Ok(store::get_list(env, &key(user, side)?)?.unwrap_or_else(|| seed(user, side)))
}

/// Adds `id` to `user`'s list; the list.
fn add<E: Env>(env: &mut E, user: u64, side: Side, id: u64) -> Result<Users, FnError> {
    let mut l = list(env, user, side)?;
    if !l.contains(id) {
        l.insert(id);
        store::put_list(env, &key(user, side)?, &l)?;
    }
    Ok(l)
}

/// Serves one `social-graph` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let mut w = Writer::new(resp);
    let side = match args::need(rec, "op")? {
        b"followers" => Side::Followers,
        b"followees" => Side::Followees,
        b"follow" => return follow(env, rec, w),
        _ => return Err(FnError::BadRequest),
    };
    let user = args::need_u64(rec, "user")?;
    if !is_user(user) {
        return Err(FnError::BadRequest);
    }
    let l = list(env, user, side)?;
    let _ = write!(w, "user={user}&{}={l}", side.name());
    w.finish()
}

fn follow<E: Env>(env: &mut E, rec: &[u8], mut w: Writer<'_>) -> Result<usize, FnError> {
    let user = args::need_token(rec, "user")?;
    let followee = args::need_token(rec, "followee")?;
    let a = env.start("social-user", SMALL, |w| write!(w, "names={user}"))?;
    let b = env.start("social-user", SMALL, |w| write!(w, "names={followee}"))?;
    let (a, b) = (env.wait(a)?, env.wait(b)?);
    let (Some(user), Some(followee)) = (field_u64(a.bytes(), "user"), field_u64(b.bytes(), "user"))
    else {
        return Err(FnError::BadRequest);
    };
    if user == followee {
        return Err(FnError::BadRequest);
    }
    let followees = add(env, user, Side::Followees, followee)?;
    let followers = add(env, followee, Side::Followers, user)?;
    let _ = write!(
        w,
        "follow=ok&user={user}&followee={followee}&followers={}&followees={}",
        followers.len(),
        followees.len()
    );
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_graph_is_symmetric() {
        assert_eq!(seed(1, Side::Followers).as_slice(), &[2, 3, 5]);
        assert_eq!(seed(1, Side::Followees).as_slice(), &[2, 3, 12]);
        for &(a, b) in FOLLOWS {
            assert!(seed(a, Side::Followees).contains(b));
            assert!(seed(b, Side::Followers).contains(a));
            assert!(is_user(a) && is_user(b) && a != b);
        }
    }
}
