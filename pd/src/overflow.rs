//! The overflow pool: complete (PD id, permission) lists for VMAs shared with more PDs than a
//! VTE's 20-slot sub-array holds (the paper's `ptr` field, §4.3).
//!
//! A VTE names a list by number. Lists are allocated on demand up to a limit fixed at
//! construction and recycled through a free list.

use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::vte::PdPerm;

/// Overflow lists, numbered `0..limit`.
#[derive(Clone, Debug)]
pub struct OverflowPool {
    lists: Vec<Option<Vec<PdPerm>>>,
    free: Vec<u32>,
    limit: u32,
}

impl OverflowPool {
    /// An empty pool that can hand out up to `limit` lists at once.
    pub const fn new(limit: u32) -> OverflowPool {
        OverflowPool {
            lists: Vec::new(),
            free: Vec::new(),
            limit,
        }
    }

    /// Allocates an empty list; [`Error::NoMemory`] when `limit` lists are in use.
    pub fn alloc(&mut self) -> Result<u32> {
        if let Some(n) = self.free.pop() {
            self.lists[n as usize] = Some(Vec::new());
            return Ok(n);
        }
        if self.lists.len() < self.limit as usize {
            self.lists.push(Some(Vec::new()));
            return Ok(self.lists.len() as u32 - 1);
        }
        Err(Error::NoMemory)
    }

    /// Frees list `n`.
    pub fn release(&mut self, n: u32) {
        if let Some(slot) = self.lists.get_mut(n as usize)
            && slot.take().is_some()
        {
            self.free.push(n);
        }
    }

    /// The entries of list `n` (empty for a list not in use).
    pub fn get(&self, n: u32) -> &[PdPerm] {
        match self.lists.get(n as usize) {
            Some(Some(l)) => l,
            _ => &[],
        }
    }

    pub(crate) fn get_mut(&mut self, n: u32) -> Option<&mut Vec<PdPerm>> {
        self.lists.get_mut(n as usize).and_then(Option::as_mut)
    }

    /// True when list `n` is in use.
    pub fn is_live(&self, n: u32) -> bool {
        matches!(self.lists.get(n as usize), Some(Some(_)))
    }

    /// Number of lists in use.
    pub fn live_count(&self) -> usize {
        self.lists.iter().filter(|l| l.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_limited_and_recycled() {
        let mut p = OverflowPool::new(2);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        assert_ne!(a, b);
        assert_eq!(p.alloc(), Err(Error::NoMemory));
        p.release(a);
        assert!(!p.is_live(a));
        assert_eq!(p.get(a), &[]);
        assert_eq!(p.alloc(), Ok(a));
        assert_eq!(p.live_count(), 2);
        p.release(7); // not a list: ignored
    }
}
