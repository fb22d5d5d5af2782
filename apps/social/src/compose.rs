//! `social-compose`: composes and publishes a post (DeathStarBench's compose-post service).
//!
//! Request `user=<name>&text=<form-encoded text>`; response
//! `post=<id>&user=<id>&mentions=<n>&urls=<n>&home=<n>`.
//!
//! Calls, in two waves of calls started at once (async) and then awaited:
//! 1. `social-unique-id` (the post id), `social-text` (mentions, short URLs) and `social-user`
//!    (the author's id);
//! 2. `social-storage` (store the post) and `social-timeline` (the author's timeline and the
//!    followers' and mentioned users' home timelines).
//!
//! (The original also attaches media ids through a media service; this port has no media.)

use core::fmt::Write;
use fjord_app_kit::{Bytes, Env, IdList, LARGE, SMALL, args, form};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field, field_u64, lines};

use crate::text::{MAX_REFS, MAX_TEXT};

/// Serves one `social-compose` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let user = args::need_token(rec, "user")?;
    let text = args::need(rec, "text")?;
    if !form::is_encoded(text, MAX_TEXT) {
        return Err(FnError::BadRequest);
    }
    let id = env.start("social-unique-id", SMALL, |w| w.write_str("kind=post"))?;
    let processed = env.start("social-text", LARGE, |w| {
        w.write_str("text=")?;
        w.bytes(text)
    })?;
    let creator = env.start("social-user", SMALL, |w| write!(w, "names={user}"))?;
    let (id, processed, creator) = (env.wait(id)?, env.wait(processed)?, env.wait(creator)?);
    let post = field_u64(id.bytes(), "id").ok_or(FnError::Failed)?;
    let author = field_u64(creator.bytes(), "user").ok_or(FnError::BadRequest)?;
    let mut new_text = &b""[..];
    let mut mentions = IdList::<MAX_REFS>::new();
    let mut urls = 0;
    for line in lines(processed.bytes()) {
        if let Some(t) = field(line, "text") {
            new_text = t;
        } else if let Some(m) = field_u64(line, "user") {
            mentions.insert(m);
        } else if field(line, "short").is_some() {
            urls += 1;
        }
    }
    let stored = env.start("social-storage", LARGE, |w| {
        write!(w, "op=store&post={post}&creator={author}&name={user}&text=")?;
        w.bytes(new_text)?;
        write!(w, "&mentions={mentions}&urls=")?;
        let shorts = lines(processed.bytes()).filter_map(|l| field(l, "short"));
        for (i, short) in shorts.enumerate() {
            if i > 0 {
                w.write_str(",")?;
            }
            w.bytes(short)?;
        }
        Ok(())
    })?;
    let timelines = env.start("social-timeline", SMALL, |w| {
        write!(w, "op=write&post={post}&user={author}&mentions={mentions}")
    })?;
    let (_, timelines) = (env.wait(stored)?, env.wait(timelines)?);
    let home = field_u64(timelines.bytes(), "home").ok_or(FnError::Failed)?;
    let mut w = Writer::new(resp);
    let _ = write!(
        w,
        "post={post}&user={author}&mentions={}&urls={urls}&home={home}",
        mentions.len()
    );
    w.finish()
}
