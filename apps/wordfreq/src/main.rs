//! The `wordfreq` function: counts the words of the request and answers one `word count` line
//! per distinct word, most frequent first (ties in word order). Words are runs of ASCII letters
//! and digits, lower-cased.
//!
//! It shows a function using the heap (`String`, `Vec`, `BTreeMap`, `format!`), which the
//! libos allocator serves from the PD's heap region (`heap_size` in the manifest). A request
//! whose words do not fit in the heap fails: the allocation failure panics, and the invocation
//! is reported as failed.
//!
//! On the host it serves one request from stdin (`echo -n "a b a" | cargo run -p
//! fjord-app-wordfreq`).
#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use fjord_libos::function::FnError;

/// The word counts of `text`, most frequent first.
fn frequencies(text: &[u8]) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for word in text
        .split(|b| !b.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word: String = word
            .iter()
            .map(|b| b.to_ascii_lowercase() as char)
            .collect();
        *counts.entry(word).or_insert(0) += 1;
    }
    let mut list: Vec<(String, usize)> = counts.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    list
}

/// Writes the `word count` lines of `req` into `resp`.
fn wordfreq(req: &[u8], resp: &mut [u8]) -> Result<usize, FnError> {
    let mut out = String::new();
    for (word, n) in frequencies(req) {
        out.push_str(&format!("{word} {n}\n"));
    }
    resp.get_mut(..out.len())
        .ok_or(FnError::ResponseTooLarge)?
        .copy_from_slice(out.as_bytes());
    Ok(out.len())
}

fjord_libos::function!(
    wordfreq,
    name = "wordfreq",
    stack_size = "16K",
    heap_size = "256K"
);

#[cfg(all(test, not(target_os = "none")))]
mod tests {
    use super::*;

    #[test]
    fn counts_words_most_frequent_first() {
        let mut resp = [0u8; 256];
        let n = wordfreq(b"The cat, the DOG; the cat!", &mut resp).unwrap();
        assert_eq!(&resp[..n], b"the 3\ncat 2\ndog 1\n");
        assert_eq!(wordfreq(b" ,; ", &mut resp), Ok(0));
    }

    #[test]
    fn a_small_response_buffer_is_reported() {
        let mut resp = [0u8; 4];
        assert_eq!(
            wordfreq(b"alpha beta", &mut resp),
            Err(FnError::ResponseTooLarge)
        );
    }
}
