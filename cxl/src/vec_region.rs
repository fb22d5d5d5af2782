//! A region in memory for tests, shared by several handles (one per simulated node), each of
//! which can be made to "crash" after a number of operations.

use crate::region::Region;
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::rc::Rc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};

/// A region held in a `Vec`, seen through handles: [`VecRegion::share`] gives another node's
/// handle on the same bytes. Single-threaded (`Rc`/`RefCell`); the "nodes" of a test take turns.
///
/// A handle counts its operations that change the region ([`Region::write`],
/// [`Region::store_u64`], [`Region::compare_exchange_u64`] and [`Region::persist`]: each is one
/// step). After [`VecRegion::crash_after`]`(n)` its first `n` further steps apply and every later
/// one is dropped: the node is dead, and the code still running on it changes nothing. Its reads
/// go on seeing the memory, and its compare-exchanges report what they would have done (`Ok`
/// when the word matched) without storing, so that code running on a dead handle ends rather
/// than retrying forever.
///
/// [`VecRegion::before_step`] runs other nodes' code between two steps of this one, to test
/// every interleaving of two operations.
///
/// [`VecRegion::crash_after_losing_unpersisted`] models memory that is not coherent: at the crash,
/// every byte this handle changed and did not [`Region::persist`] since goes back to what it
/// held before (as if it had stayed in the dead node's cache). Other handles' writes to those
/// bytes in between are not modelled.
pub struct VecRegion {
    mem: Rc<RefCell<Vec<u8>>>,
    /// Steps still allowed before the crash (`None`: no crash planned).
    budget: Cell<Option<u64>>,
    lose_unpersisted: Cell<bool>,
    crashed: Cell<bool>,
    steps: Cell<u64>,
    persists: Cell<u64>,
    /// Bytes changed and not yet persisted by this handle, with the value each held before.
    unpersisted: RefCell<BTreeMap<u64, u8>>,
    /// Code to run before the step of this number.
    hook: RefCell<Option<(u64, Hook)>>,
}

type Hook = Box<dyn FnOnce()>;

impl VecRegion {
    /// A region of `len` zero bytes (a fresh shared-memory file), seen through a first handle.
    pub fn new(len: usize) -> VecRegion {
        VecRegion::over(Rc::new(RefCell::new(vec![0; len])))
    }

    fn over(mem: Rc<RefCell<Vec<u8>>>) -> VecRegion {
        VecRegion {
            mem,
            budget: Cell::new(None),
            lose_unpersisted: Cell::new(false),
            crashed: Cell::new(false),
            steps: Cell::new(0),
            persists: Cell::new(0),
            unpersisted: RefCell::new(BTreeMap::new()),
            hook: RefCell::new(None),
        }
    }

    /// Another handle on the same bytes (another node), alive, with its own step count.
    pub fn share(&self) -> VecRegion {
        VecRegion::over(self.mem.clone())
    }

    /// Lets this handle take `steps` more steps, then drops everything it does.
    pub fn crash_after(&self, steps: u64) {
        self.budget.set(Some(steps));
    }

    /// As [`VecRegion::crash_after`], and at the crash this handle's unpersisted changes are lost.
    pub fn crash_after_losing_unpersisted(&self, steps: u64) {
        self.lose_unpersisted.set(true);
        self.budget.set(Some(steps));
    }

    /// Runs `f` once, just before this handle applies its step number `step` (counting from 0
    /// at the handle's creation): `f` typically acts through other handles, as other nodes
    /// would between two of this node's operations.
    pub fn before_step(&self, step: u64, f: impl FnOnce() + 'static) {
        *self.hook.borrow_mut() = Some((step, Box::new(f)));
    }

    /// Crashes this handle now (losing its unpersisted changes if it was told to).
    pub fn crash(&self) {
        if !self.crashed.get() {
            self.budget.set(Some(0));
            self.step();
        }
    }

    /// Whether this handle has crashed.
    pub fn crashed(&self) -> bool {
        self.crashed.get()
    }

    /// Steps this handle has applied so far.
    pub fn steps(&self) -> u64 {
        self.steps.get()
    }

    /// Persists this handle has applied so far.
    pub fn persists(&self) -> u64 {
        self.persists.get()
    }

    /// A copy of every byte of the region.
    pub fn snapshot(&self) -> Vec<u8> {
        self.mem.borrow().clone()
    }

    /// Flips the bits of `mask` in the byte at `offset` (a fault of the memory, not a step).
    pub fn corrupt(&self, offset: u64, mask: u8) {
        self.mem.borrow_mut()[offset as usize] ^= mask;
    }

    /// Whether the next step applies, counting it; crashes the handle when the budget is spent.
    fn step(&self) -> bool {
        let due = matches!(*self.hook.borrow(), Some((n, _)) if n == self.steps.get());
        let hook = if due {
            self.hook.borrow_mut().take()
        } else {
            None
        };
        if let Some((_, f)) = hook {
            f();
        }
        if self.crashed.get() {
            return false;
        }
        match self.budget.get() {
            Some(0) => {
                self.crashed.set(true);
                if self.lose_unpersisted.get() {
                    let mut mem = self.mem.borrow_mut();
                    for (&at, &old) in self.unpersisted.borrow().iter() {
                        mem[at as usize] = old;
                    }
                }
                self.unpersisted.borrow_mut().clear();
                false
            }
            budget => {
                self.budget.set(budget.map(|b| b - 1));
                self.steps.set(self.steps.get() + 1);
                true
            }
        }
    }

    /// Writes `data` at `offset`, remembering the old bytes when unpersisted changes can be lost.
    fn apply(&self, offset: u64, data: &[u8]) {
        let mut mem = self.mem.borrow_mut();
        let at = offset as usize;
        if self.lose_unpersisted.get() {
            let mut log = self.unpersisted.borrow_mut();
            for (i, old) in mem[at..at + data.len()].iter().enumerate() {
                log.entry(offset + i as u64).or_insert(*old);
            }
        }
        mem[at..at + data.len()].copy_from_slice(data);
    }
}

impl Region for VecRegion {
    fn len(&self) -> u64 {
        self.mem.borrow().len() as u64
    }

    fn read(&self, offset: u64, buf: &mut [u8]) {
        let at = offset as usize;
        buf.copy_from_slice(&self.mem.borrow()[at..at + buf.len()]);
    }

    fn write(&self, offset: u64, data: &[u8]) {
        if self.step() {
            self.apply(offset, data);
        }
    }

    fn load_u64(&self, offset: u64) -> u64 {
        assert_eq!(offset % 8, 0, "unaligned atomic at {offset}");
        let mut word = [0; 8];
        self.read(offset, &mut word);
        u64::from_le_bytes(word)
    }

    fn store_u64(&self, offset: u64, value: u64) {
        assert_eq!(offset % 8, 0, "unaligned atomic at {offset}");
        if self.step() {
            self.apply(offset, &value.to_le_bytes());
        }
    }

    fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64> {
        let applies = self.step();
        let found = self.load_u64(offset);
        if found != current {
            return Err(found);
        }
        if applies {
            self.apply(offset, &new.to_le_bytes());
        }
        Ok(current)
    }

    fn persist(&self, offset: u64, len: u64) {
        assert!(offset + len <= self.len(), "persist past the end");
        if self.step() {
            self.persists.set(self.persists.get() + 1);
            let mut log = self.unpersisted.borrow_mut();
            let done: Vec<u64> = log.range(offset..offset + len).map(|(&k, _)| k).collect();
            for k in done {
                log.remove(&k);
            }
        }
    }
}
