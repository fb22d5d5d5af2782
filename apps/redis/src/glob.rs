//! Redis's glob patterns (`stringmatchlen` in `util.c`), as `KEYS` and `CONFIG GET` use them:
//! `*` any run of bytes, `?` one byte, `[abc]`, `[^a]` (negation), `[a-z]` (ranges, either
//! order), `\x` the byte `x` (inside and outside brackets). Malformed patterns behave as in
//! Redis: an unclosed `[` ends at the end of the pattern, a trailing `\` is a literal.
//!
//! Redis matches recursively, one level per `*`, so a pattern of many stars can take deep
//! recursion; this is the equivalent iterative matcher (one backtracking point, the last `*`),
//! which is correct because every other token matches exactly one byte. It keeps Redis's one
//! quirk about empty strings: an empty string matches only the empty pattern (`KEYS *` still
//! lists an empty key name, because `KEYS` short-cuts the pattern `*`). The tests check it
//! against what Redis 7.0.15's `KEYS` replied for 300 patterns over 64 keys, recorded once
//! with a real server (`glob_testdata.rs`), and with properties that need no reference matcher.

/// The byte at `i`, or 0 past the end (the C code reads the string's terminating NUL there).
fn at(p: &[u8], i: usize) -> u8 {
    p.get(i).copied().unwrap_or(0)
}

fn fold(c: u8, nocase: bool) -> u8 {
    if nocase { c.to_ascii_lowercase() } else { c }
}

/// Whether the single-byte token at `pattern[pi]` (not a `*`) matches `c`, and the index
/// after the token.
fn token(pattern: &[u8], mut pi: usize, c: u8, nocase: bool) -> (bool, usize) {
    let len = pattern.len();
    match pattern[pi] {
        b'?' => (true, pi + 1),
        b'[' => {
            pi += 1;
            let negate = at(pattern, pi) == b'^';
            if negate {
                pi += 1;
            }
            let mut matched = false;
            loop {
                let rest = len.saturating_sub(pi);
                if at(pattern, pi) == b'\\' && rest >= 2 {
                    pi += 1;
                    if pattern[pi] == c {
                        matched = true;
                    }
                } else if at(pattern, pi) == b']' {
                    break;
                } else if rest == 0 {
                    // Unclosed: the class ends with the pattern.
                    pi -= 1;
                    break;
                } else if rest >= 3 && pattern[pi + 1] == b'-' {
                    // Ranges compare C `char`s, which are signed on x86-64.
                    let mut start = fold(pattern[pi], nocase) as i8;
                    let mut end = fold(pattern[pi + 2], nocase) as i8;
                    if start > end {
                        core::mem::swap(&mut start, &mut end);
                    }
                    let ch = fold(c, nocase) as i8;
                    pi += 2;
                    if ch >= start && ch <= end {
                        matched = true;
                    }
                } else if fold(pattern[pi], nocase) == fold(c, nocase) {
                    matched = true;
                }
                pi += 1;
            }
            (matched != negate, pi + 1)
        }
        b'\\' if len - pi >= 2 => (fold(pattern[pi + 1], nocase) == fold(c, nocase), pi + 2),
        lit => (fold(lit, nocase) == fold(c, nocase), pi + 1),
    }
}

/// Whether `string` matches the glob `pattern` (ASCII case-insensitively when `nocase`).
pub fn matches(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    if string.is_empty() {
        return pattern.is_empty();
    }
    let (mut pi, mut si) = (0usize, 0usize);
    // After the last `*` seen: where the rest of the pattern starts, and the string position
    // it was last tried at.
    let mut backtrack: Option<(usize, usize)> = None;
    while si < string.len() {
        if pi < pattern.len() {
            if pattern[pi] == b'*' {
                pi += 1;
                backtrack = Some((pi, si));
                continue;
            }
            let (ok, next) = token(pattern, pi, string[si], nocase);
            if ok {
                pi = next;
                si += 1;
                continue;
            }
        }
        match backtrack {
            Some((after_star, tried)) => {
                pi = after_star;
                si = tried + 1;
                backtrack = Some((after_star, si));
            }
            None => return false,
        }
    }
    while pi < pattern.len() && pattern[pi] == b'*' {
        pi += 1;
    }
    pi == pattern.len()
}

#[cfg(test)]
#[path = "glob_testdata.rs"]
mod testdata;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Db, Ttl};
    use alloc::vec::Vec;
    use proptest::prelude::*;

    #[test]
    fn redis_examples() {
        let yes: &[(&[u8], &[u8])] = &[
            (b"*", b"anything"),
            (b"h?llo", b"hello"),
            (b"h*llo", b"heeeello"),
            (b"h*llo", b"hllo"),
            (b"h[ae]llo", b"hallo"),
            (b"h[^e]llo", b"hallo"),
            (b"h[a-b]llo", b"hbllo"),
            (b"h[b-a]llo", b"hallo"),
            (b"h\\*llo", b"h*llo"),
            (b"key:*", b"key:000000001"),
            (b"*:*", b"a:b"),
            (b"[\\]]", b"]"),
            (b"[abc", b"b"),
            (b"[^", b"x"),
            (b"[a-", b"-"),
            (b"a\\", b"a\\"),
            (b"a**b", b"ab"),
            (b"*a*b*c*", b"xxaxxbxxcxx"),
            (b"a*b", b"abbb"),
            // Ranges compare signed `char`s: `[a-\xff]` is `[\xff-a]`, -1 to 97.
            (b"[a-\xff]", b"*"),
            (b"[a-\xff]", b"\xff"),
        ];
        for (p, s) in yes {
            assert!(matches(p, s, false), "{p:?} {s:?}");
        }
        let no: &[(&[u8], &[u8])] = &[
            (b"h?llo", b"hllo"),
            (b"h[^e]llo", b"hello"),
            (b"h[a-b]llo", b"hcllo"),
            (b"h\\*llo", b"hello"),
            (b"a[", b"a"),
            (b"[]]", b"]"),
            (b"*", b""),
            (b"?", b""),
            (b"abc", b"ab"),
            (b"ab", b"abc"),
            (b"a*b", b"abc"),
            (b"[a-\xff]", b"b"),
            (b"[a-\xff]", b"\xe9"),
        ];
        for (p, s) in no {
            assert!(!matches(p, s, false), "{p:?} {s:?}");
        }
        assert!(matches(b"", b"", false));
        assert!(!matches(b"", b"a", false));
        assert!(matches(b"SAVE", b"save", true));
        assert!(!matches(b"SAVE", b"save", false));
        assert!(matches(b"app*", b"appendonly", true));
        assert!(matches(b"[A-C]*", b"bind", true));
        assert!(!matches(b"[A-C]*", b"bind", false));
    }

    #[test]
    fn many_stars_do_not_recurse() {
        let mut p = Vec::new();
        for _ in 0..100_000 {
            p.extend_from_slice(b"*a");
        }
        assert!(!matches(&p, b"aaaaaaaaab", false));
        p.push(b'*');
        let s = alloc::vec![b'a'; 100_000];
        assert!(matches(&p, &s, false));
    }

    /// The keys [`testdata::CASES`] has Redis's answer for, as a mask.
    fn mask(keys: impl IntoIterator<Item = Vec<u8>>) -> u64 {
        keys.into_iter()
            .map(|k| {
                let i = testdata::KEYS.iter().position(|t| *t == k).unwrap();
                1u64 << i
            })
            .fold(0, |a, b| a | b)
    }

    #[test]
    fn keys_replies_as_redis_did() {
        let mut db = Db::new();
        for k in testdata::KEYS {
            db.set(k.to_vec(), b"1".to_vec(), Ttl::Clear);
        }
        assert_eq!(db.len(), 64);
        for &(pattern, want) in testdata::CASES {
            let got = mask(db.keys_matching(pattern, 0));
            assert_eq!(got, want, "KEYS {}", pattern.escape_ascii());
            // And `matches` alone, for every key but the empty one under `*`.
            let direct = mask(
                testdata::KEYS
                    .iter()
                    .filter(|k| matches(pattern, k, false))
                    .map(|k| k.to_vec()),
            );
            let empty_key = u64::from(pattern == b"*");
            assert_eq!(direct, want & !empty_key, "{}", pattern.escape_ascii());
        }
    }

    /// A byte that is special in a pattern.
    fn special(c: u8) -> bool {
        matches!(c, b'*' | b'?' | b'[' | b'\\')
    }

    /// How [`pattern_for`] turns one byte of the string into a pattern token.
    #[derive(Clone, Copy, Debug)]
    enum Token {
        /// The byte, escaped if special.
        Literal,
        /// `?`.
        Any,
        /// `[\c]`.
        Class,
        /// `[^\d]` for some other byte `d`.
        NotClass(u8),
        /// `[lo-hi]` around the byte, ends in either order.
        Range(u8, u8, bool),
    }

    /// A pattern matching `s`: a token per byte, with `stars[i]` stars before token `i` (and
    /// after the last, for `i == s.len()`).
    fn pattern_for(s: &[u8], tokens: &[Token], stars: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        for (i, &c) in s.iter().enumerate() {
            p.extend(core::iter::repeat_n(b'*', usize::from(stars[i])));
            match tokens[i] {
                Token::Literal if special(c) => p.extend_from_slice(&[b'\\', c]),
                Token::Literal => p.push(c),
                Token::Any => p.push(b'?'),
                Token::Class => p.extend_from_slice(&[b'[', b'\\', c, b']']),
                Token::NotClass(d) => {
                    let d = if d == c { c.wrapping_add(1) } else { d };
                    p.extend_from_slice(&[b'[', b'^', b'\\', d, b']']);
                }
                Token::Range(below, above, swap) => {
                    // Ends compared as signed bytes, as Redis compares them.
                    let lo = (c as i8).saturating_sub(below as i8) as u8;
                    let hi = (c as i8).saturating_add(above as i8) as u8;
                    let (a, b) = if swap { (hi, lo) } else { (lo, hi) };
                    // A first end `\\`, `]` or `^` would read as an escape, the class's end or
                    // a negation; an end `]` as the class's end.
                    if matches!(a, b'\\' | b']' | b'^') || b == b']' {
                        p.push(b'?');
                    } else {
                        p.extend_from_slice(&[b'[', a, b'-', b, b']']);
                    }
                }
            }
        }
        p.extend(core::iter::repeat_n(b'*', usize::from(stars[s.len()])));
        p
    }

    fn token() -> impl Strategy<Value = Token> {
        prop_oneof![
            Just(Token::Literal),
            Just(Token::Any),
            Just(Token::Class),
            any::<u8>().prop_map(Token::NotClass),
            (0u8..4, 0u8..4, any::<bool>()).prop_map(|(b, a, s)| Token::Range(b, a, s)),
        ]
    }

    /// A non-empty string, a token for each of its bytes, stars for each gap (mostly none).
    fn string_and_pattern() -> impl Strategy<Value = (Vec<u8>, Vec<Token>, Vec<u8>)> {
        proptest::collection::vec(any::<u8>(), 1..12).prop_flat_map(|s| {
            let n = s.len();
            (
                Just(s),
                proptest::collection::vec(token(), n),
                proptest::collection::vec(prop_oneof![4 => Just(0u8), 1 => 1u8..3], n + 1),
            )
        })
    }

    /// Bytes from a small alphabet, so patterns and strings often meet.
    fn bytes(alphabet: &'static [u8], max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::sample::select(alphabet), 0..max)
    }

    proptest! {
        #[test]
        fn a_pattern_without_special_bytes_is_equality(
            p in bytes(b"abAB-]^:", 6),
            s in bytes(b"abAB-]^:", 6),
        ) {
            prop_assert_eq!(matches(&p, &s, false), p == s);
        }

        #[test]
        fn a_star_matches_every_non_empty_string(s in proptest::collection::vec(any::<u8>(), 1..20)) {
            prop_assert!(matches(b"*", &s, false));
            prop_assert!(matches(b"**", &s, true));
            prop_assert!(!matches(b"", &s, false));
        }

        #[test]
        fn a_pattern_built_from_a_string_matches_it((s, tokens, stars) in string_and_pattern()) {
            let p = pattern_for(&s, &tokens, &stars);
            prop_assert!(matches(&p, &s, false), "{}", p.escape_ascii());
        }

        #[test]
        fn without_stars_one_wrong_byte_or_length_fails(
            (s, tokens, _) in string_and_pattern(),
            at in any::<proptest::sample::Index>(),
            other in any::<u8>(),
        ) {
            let none = alloc::vec![0u8; s.len() + 1];
            let p = pattern_for(&s, &tokens, &none);
            // Another byte where the token is a literal or `[\c]`.
            let i = at.index(s.len());
            if matches!(tokens[i], Token::Literal | Token::Class) && other != s[i] {
                let mut t = s.clone();
                t[i] = other;
                prop_assert!(!matches(&p, &t, false));
            }
            // One byte more or less.
            let mut longer = s.clone();
            longer.insert(i, other);
            prop_assert!(!matches(&p, &longer, false));
            let mut shorter = s.clone();
            shorter.remove(i);
            prop_assert!(!matches(&p, &shorter, false));
        }

        #[test]
        fn nocase_is_matching_lowercased_pattern_and_string(
            p in bytes(b"abAB*?\\-]^", 8),
            s in bytes(b"abAB*?\\-]^", 8),
        ) {
            // Without classes: an escaped byte inside a class is compared without folding.
            let lower = |v: &[u8]| v.to_ascii_lowercase();
            prop_assert_eq!(matches(&p, &s, true), matches(&lower(&p), &lower(&s), false));
            prop_assert_eq!(matches(&p, &s, true), matches(&p, &s.to_ascii_uppercase(), true));
        }

        #[test]
        fn doubling_stars_changes_nothing(
            p in bytes(b"ab*?[]^-", 8),
            s in bytes(b"ab*?[]^-", 8),
            nocase: bool,
        ) {
            let mut doubled = Vec::new();
            for &c in &p {
                doubled.push(c);
                if c == b'*' {
                    doubled.push(c);
                }
            }
            prop_assert_eq!(matches(&p, &s, nocase), matches(&doubled, &s, nocase));
        }

        #[test]
        fn never_panics(
            p in proptest::collection::vec(any::<u8>(), 0..16),
            s in proptest::collection::vec(any::<u8>(), 0..16),
            nocase: bool,
        ) {
            let _ = matches(&p, &s, nocase);
        }
    }
}
