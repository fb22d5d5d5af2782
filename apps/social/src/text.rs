//! `social-text`: a post's text: user mentions and URLs (DeathStarBench's text service with
//! its url-shorten and user-mention services folded in).
//!
//! Request `text=<form-encoded text>`; response
//! ```text
//! text=<form-encoded text, each URL replaced by its short URL>
//! mention=<name>&user=<id>          (one per mentioned registered user)
//! url=<form-encoded URL>&short=<short URL>   (one per URL)
//! ```
//! Calls `social-user` for the mentioned names (started async, awaited after the URLs are
//! shortened). Each short URL is stored under `social/url/<code>` (the code is a hash of the
//! URL, so the same URL always maps to the same key; the original draws random codes).

use core::fmt::{self, Write};
use core::ops::Range;
use fjord_app_kit::form::{self, Encoded};
use fjord_app_kit::hash::{Base62, fnv1a64};
use fjord_app_kit::store::Key;
use fjord_app_kit::{Bytes, Env, SMALL, args};
use fjord_libos::function::FnError;
use fjord_libos::text::{Writer, field, lines};

/// Longest post text, in decoded bytes.
pub const MAX_TEXT: usize = 512;
/// Most mentions and URLs of a post that are processed.
pub const MAX_REFS: usize = 8;
/// Longest user name in a mention.
pub const MAX_NAME: usize = 32;

fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// The distinct names mentioned as `@name` (at the start or after a non-name character), at
/// most [`MAX_REFS`].
pub fn mentions(text: &[u8]) -> ([&[u8]; MAX_REFS], usize) {
    let mut out = [&b""[..]; MAX_REFS];
    let mut n = 0;
    let mut i = 0;
    while i < text.len() && n < MAX_REFS {
        if text[i] == b'@' && (i == 0 || !is_name_char(text[i - 1])) {
            let len = text[i + 1..]
                .iter()
                .take_while(|&&b| is_name_char(b))
                .count();
            let name = &text[i + 1..i + 1 + len];
            if (1..=MAX_NAME).contains(&len) && !out[..n].contains(&name) {
                out[n] = name;
                n += 1;
            }
            i += len;
        }
        i += 1;
    }
    (out, n)
}

/// The URLs (`http://` or `https://` up to the next white space), at most [`MAX_REFS`].
pub fn urls(text: &[u8]) -> ([Range<usize>; MAX_REFS], usize) {
    let mut out: [Range<usize>; MAX_REFS] = Default::default();
    let mut n = 0;
    let mut i = 0;
    while i < text.len() && n < MAX_REFS {
        let rest = &text[i..];
        let at_word = i == 0 || text[i - 1].is_ascii_whitespace();
        let scheme = rest.starts_with(b"http://") || rest.starts_with(b"https://");
        if at_word && scheme {
            let len = rest.iter().take_while(|b| !b.is_ascii_whitespace()).count();
            out[n] = i..i + len;
            n += 1;
            i += len;
        } else {
            i += 1;
        }
    }
    (out, n)
}

/// The short URL of a long one.
#[derive(Clone, Copy, Debug)]
pub struct ShortUrl(pub u64);

impl ShortUrl {
    /// The short URL of `long`.
    pub fn of(long: &[u8]) -> ShortUrl {
        ShortUrl(fnv1a64(long))
    }

    /// Its 10-character code.
    pub fn code(self) -> Base62 {
        Base62 {
            value: self.0,
            digits: 10,
        }
    }
}

impl fmt::Display for ShortUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://short-url.com/{}", self.code())
    }
}

/// Serves one `social-text` request.
pub fn serve<E: Env>(env: &mut E, req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let rec = args::record(req)?;
    let mut text = [0u8; MAX_TEXT];
    let len = form::decode(args::need(rec, "text")?, &mut text).ok_or(FnError::BadRequest)?;
    let text = &text[..len];
    let (names, n_names) = mentions(text);
    let lookup = match n_names {
        0 => None,
        _ => Some(env.start("social-user", SMALL, |w| {
            w.write_str("names=")?;
            for (i, name) in names[..n_names].iter().enumerate() {
                if i > 0 {
                    w.write_str(",")?;
                }
                w.bytes(name)?;
            }
            Ok(())
        })?),
    };
    let (found, n_urls) = urls(text);
    let mut shortened = [0u8; MAX_TEXT + MAX_REFS * 32];
    let mut out = Writer::new(&mut shortened);
    let mut done = 0;
    for r in &found[..n_urls] {
        let short = ShortUrl::of(&text[r.clone()]);
        let key = Key::new(format_args!("social/url/{}", short.code()))?;
        env.kv_put(key.as_bytes(), &text[r.clone()])?;
        let _ = out.bytes(&text[done..r.start]);
        let _ = write!(out, "{short}");
        done = r.end;
    }
    let _ = out.bytes(&text[done..]);
    out.finish()?;
    let mut w = Writer::new(resp);
    let _ = writeln!(w, "text={}", Encoded(out.written()));
    if let Some(lookup) = lookup {
        for line in lines(env.wait(lookup)?.bytes()) {
            let (Some(name), Some(id)) = (field(line, "name"), field(line, "user")) else {
                return Err(FnError::Failed);
            };
            let _ = w.bytes(b"mention=");
            let _ = w.bytes(name);
            let _ = w.bytes(b"&user=");
            let _ = w.bytes(id);
            let _ = writeln!(w);
        }
    }
    for r in &found[..n_urls] {
        let long = &text[r.clone()];
        let _ = writeln!(w, "url={}&short={}", Encoded(long), ShortUrl::of(long));
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_mentions() {
        let (m, n) = mentions(b"@alice hi @bob, and @bob again; mail me@x.org @ @carol_2!");
        assert_eq!(&m[..n], [&b"alice"[..], b"bob", b"carol_2"]);
        assert_eq!(mentions(b"no mentions").1, 0);
    }

    #[test]
    fn finds_urls() {
        let t = b"see https://a.io/x?y=1 and http://b.org, not xhttp://c";
        let (u, n) = urls(t);
        assert_eq!(n, 2);
        assert_eq!(&t[u[0].clone()], b"https://a.io/x?y=1");
        assert_eq!(&t[u[1].clone()], b"http://b.org,");
    }

    #[test]
    fn short_urls_are_stable() {
        let a = std::format!("{}", ShortUrl::of(b"https://a.io"));
        assert_eq!(a, std::format!("{}", ShortUrl::of(b"https://a.io")));
        assert_eq!(a.len(), "http://short-url.com/".len() + 10);
        assert_ne!(a, std::format!("{}", ShortUrl::of(b"https://b.io")));
    }
}
