//! [`IdList`]: at most `N` numeric ids, written `1,2,3`: follower sets, timelines, review
//! lists, hotel candidates.

use core::fmt;
use fjord_libos::text::parse_u64;

/// A list of at most `N` ids in a fixed array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdList<const N: usize> {
    ids: [u64; N],
    len: usize,
}

impl<const N: usize> Default for IdList<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> IdList<N> {
    /// An empty list.
    pub const fn new() -> Self {
        IdList {
            ids: [0; N],
            len: 0,
        }
    }

    /// Parses `1,2,3` (empty text is the empty list); `None` if malformed or longer than `N`.
    pub fn parse(text: &[u8]) -> Option<Self> {
        let mut list = Self::new();
        for item in text.split(|&b| b == b',').filter(|i| !i.is_empty()) {
            if !list.push(parse_u64(item)?) {
                return None;
            }
        }
        Some(list)
    }

    /// The ids.
    pub fn as_slice(&self) -> &[u64] {
        &self.ids[..self.len]
    }

    /// How many ids it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `id` is in the list.
    pub fn contains(&self, id: u64) -> bool {
        self.as_slice().contains(&id)
    }

    /// Appends `id`; `false` (and unchanged) when full.
    pub fn push(&mut self, id: u64) -> bool {
        if self.len == N {
            return false;
        }
        self.ids[self.len] = id;
        self.len += 1;
        true
    }

    /// Appends `id` unless present; `false` when full (a present id is success).
    pub fn insert(&mut self, id: u64) -> bool {
        self.contains(id) || self.push(id)
    }

    /// Puts `id` first, dropping it from later positions and dropping the last id when full:
    /// a most-recent-first list capped at `N`.
    pub fn push_front(&mut self, id: u64) {
        let keep = match self.as_slice().iter().position(|&x| x == id) {
            Some(i) => i,
            None => self.len.min(N - 1),
        };
        self.ids.copy_within(0..keep, 1);
        self.ids[0] = id;
        if keep == self.len {
            self.len = (self.len + 1).min(N);
        }
    }
}

impl<const N: usize> fmt::Display for IdList<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, id) in self.as_slice().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{id}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn parses_and_prints() {
        let l = IdList::<4>::parse(b"3,1,2").unwrap();
        assert_eq!(l.as_slice(), &[3, 1, 2]);
        assert_eq!(l.to_string(), "3,1,2");
        assert_eq!(IdList::<4>::parse(b"").unwrap().len(), 0);
        assert!(IdList::<2>::parse(b"1,2,3").is_none());
        assert!(IdList::<2>::parse(b"1,x").is_none());
    }

    #[test]
    fn push_front_keeps_the_newest_n() {
        let mut l = IdList::<3>::new();
        for id in 1..=5 {
            l.push_front(id);
        }
        assert_eq!(l.as_slice(), &[5, 4, 3]);
        l.push_front(3);
        assert_eq!(l.as_slice(), &[3, 5, 4]);
        l.push_front(5);
        assert_eq!(l.as_slice(), &[5, 3, 4]);
        assert!(l.insert(4));
        assert!(!l.insert(9));
    }
}
