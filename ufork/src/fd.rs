//! File descriptors: per-μprocess descriptor tables over shared, reference-counted open files.
//!
//! As in POSIX, a descriptor names an *open file* (an open file description), and several
//! descriptors, in one μprocess (`dup`, `dup2`) or in several (`fork`), may name the same one.
//! [`OpenFiles`] holds the open files with a count of the descriptors naming each;
//! [`FdTable`] maps one μprocess's descriptor numbers to them. When the last descriptor of an
//! open file is closed, the table hands the object back to the caller (for a pipe end, the
//! kernel then drops the pipe's reader or writer count; see [`crate::pipe`]).
//!
//! The object type `T` is the kernel's (a pipe end, the console); this module only counts.

use alloc::vec::Vec;

/// Why a descriptor operation was refused; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FdError {
    /// The descriptor is not open, or is beyond the table's limit (`EBADF`).
    BadFd,
    /// Every descriptor number below the limit is in use (`EMFILE`).
    TooManyOpen,
    /// The system-wide open-file table is full (`ENFILE`).
    TooManyFiles,
}

impl FdError {
    /// The Linux errno value the system-call layer returns (negated).
    pub const fn errno(self) -> i32 {
        match self {
            FdError::BadFd => 9,
            FdError::TooManyOpen => 24,
            FdError::TooManyFiles => 23,
        }
    }
}

/// A descriptor number.
pub type Fd = u32;

/// The identifier of an open file in [`OpenFiles`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(u32);

impl FileId {
    /// The slot number.
    pub const fn raw(self) -> u32 {
        self.0
    }
}

#[derive(Clone, Debug)]
struct Entry<T> {
    obj: T,
    refs: u32,
}

/// The system-wide open files, each with the number of descriptors naming it.
#[derive(Clone, Debug)]
pub struct OpenFiles<T> {
    slots: Vec<Option<Entry<T>>>,
    free: Vec<u32>,
    limit: usize,
}

impl<T> OpenFiles<T> {
    /// An empty table for at most `limit` open files.
    pub const fn new(limit: usize) -> OpenFiles<T> {
        OpenFiles {
            slots: Vec::new(),
            free: Vec::new(),
            limit,
        }
    }

    /// The number of open files.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// True when no file is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when another file can be opened.
    pub fn has_room(&self) -> bool {
        !self.free.is_empty() || self.slots.len() < self.limit
    }

    /// Opens `obj` named by one descriptor (count 1). On error the object is handed back.
    fn open(&mut self, obj: T) -> Result<FileId, (FdError, T)> {
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = Some(Entry { obj, refs: 1 });
            return Ok(FileId(i));
        }
        if self.slots.len() >= self.limit || self.slots.len() >= u32::MAX as usize {
            return Err((FdError::TooManyFiles, obj));
        }
        self.slots.push(Some(Entry { obj, refs: 1 }));
        Ok(FileId(self.slots.len() as u32 - 1))
    }

    /// The object of an open file.
    pub fn get(&self, id: FileId) -> Option<&T> {
        self.slots.get(id.0 as usize)?.as_ref().map(|e| &e.obj)
    }

    /// The object of an open file, mutably (to move a file offset, say).
    pub fn get_mut(&mut self, id: FileId) -> Option<&mut T> {
        self.slots
            .get_mut(id.0 as usize)?
            .as_mut()
            .map(|e| &mut e.obj)
    }

    /// The number of descriptors naming the file (0 if it is not open).
    pub fn refs(&self, id: FileId) -> u32 {
        match self.slots.get(id.0 as usize) {
            Some(Some(e)) => e.refs,
            _ => 0,
        }
    }

    fn retain(&mut self, id: FileId) -> Result<(), FdError> {
        match self.slots.get_mut(id.0 as usize) {
            Some(Some(e)) => {
                e.refs = e.refs.checked_add(1).ok_or(FdError::TooManyFiles)?;
                Ok(())
            }
            _ => Err(FdError::BadFd),
        }
    }

    fn release(&mut self, id: FileId) -> Option<T> {
        let slot = self.slots.get_mut(id.0 as usize)?;
        let e = slot.as_mut()?;
        e.refs = e.refs.saturating_sub(1);
        if e.refs > 0 {
            return None;
        }
        self.free.push(id.0);
        slot.take().map(|e| e.obj)
    }
}

/// One μprocess's descriptors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdTable {
    slots: Vec<Option<FileId>>,
    limit: Fd,
}

impl FdTable {
    /// An empty table accepting descriptors `0..limit`.
    pub const fn new(limit: Fd) -> FdTable {
        FdTable {
            slots: Vec::new(),
            limit,
        }
    }

    /// The open file `fd` names.
    pub fn get(&self, fd: Fd) -> Result<FileId, FdError> {
        self.slots
            .get(fd as usize)
            .copied()
            .flatten()
            .ok_or(FdError::BadFd)
    }

    /// The lowest descriptor number not in use.
    fn lowest_free(&self) -> Result<Fd, FdError> {
        let n = self
            .slots
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.slots.len());
        if n as u64 >= self.limit as u64 {
            return Err(FdError::TooManyOpen);
        }
        Ok(n as Fd)
    }

    fn put(&mut self, fd: Fd, id: FileId) {
        let i = fd as usize;
        if i >= self.slots.len() {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = Some(id);
    }

    /// Makes the lowest free descriptor name the open file `id` (one more reference to it).
    pub fn install<T>(&mut self, files: &mut OpenFiles<T>, id: FileId) -> Result<Fd, FdError> {
        let fd = self.lowest_free()?;
        files.retain(id)?;
        self.put(fd, id);
        Ok(fd)
    }

    /// Opens `obj` as a new open file named by the lowest free descriptor. On error the object
    /// is handed back so that the caller can undo what creating it did.
    pub fn open<T>(&mut self, files: &mut OpenFiles<T>, obj: T) -> Result<Fd, (FdError, T)> {
        let fd = match self.lowest_free() {
            Ok(fd) => fd,
            Err(e) => return Err((e, obj)),
        };
        let id = files.open(obj)?;
        self.put(fd, id);
        Ok(fd)
    }

    /// `dup`: the lowest free descriptor names the same open file as `fd`.
    pub fn dup<T>(&mut self, files: &mut OpenFiles<T>, fd: Fd) -> Result<Fd, FdError> {
        let id = self.get(fd)?;
        self.install(files, id)
    }

    /// `dup2(old, new)`: `new` names the same open file as `old`, closing what `new` named
    /// before. `dup2(fd, fd)` on an open `fd` does nothing. Returns `new`, and the object of
    /// the open file whose last descriptor this closed, if any.
    pub fn dup2<T>(
        &mut self,
        files: &mut OpenFiles<T>,
        old: Fd,
        new: Fd,
    ) -> Result<(Fd, Option<T>), FdError> {
        let id = self.get(old)?;
        if new >= self.limit {
            return Err(FdError::BadFd);
        }
        if old == new {
            return Ok((new, None));
        }
        files.retain(id)?;
        let closed = match self.get(new) {
            Ok(prev) => files.release(prev),
            Err(_) => None,
        };
        self.put(new, id);
        Ok((new, closed))
    }

    /// `close(fd)`. Returns the object of the open file if this was its last descriptor.
    pub fn close<T>(&mut self, files: &mut OpenFiles<T>, fd: Fd) -> Result<Option<T>, FdError> {
        let id = self.get(fd)?;
        self.slots[fd as usize] = None;
        while self.slots.last() == Some(&None) {
            self.slots.pop();
        }
        Ok(files.release(id))
    }

    /// The child's table at fork: the same descriptors naming the same open files (each gets
    /// one more reference).
    pub fn fork<T>(&self, files: &mut OpenFiles<T>) -> Result<FdTable, FdError> {
        self.fork_into(files, FdTable::new(0))
    }

    /// [`FdTable::fork`], the child's table made in `into`'s allocation (an emptied table).
    pub fn fork_into<T>(
        &self,
        files: &mut OpenFiles<T>,
        mut into: FdTable,
    ) -> Result<FdTable, FdError> {
        for (done, id) in self.slots.iter().flatten().enumerate() {
            if let Err(e) = files.retain(*id) {
                // Undo the references taken so far.
                for id in self.slots.iter().flatten().take(done) {
                    files.release(*id);
                }
                return Err(e);
            }
        }
        // (A derived `clone_from` would allocate a new vector.)
        into.slots.clear();
        into.slots.extend_from_slice(&self.slots);
        into.limit = self.limit;
        Ok(into)
    }

    /// Closes every descriptor (at exit). Returns the objects whose last descriptor went.
    pub fn close_all<T>(&mut self, files: &mut OpenFiles<T>) -> Vec<T> {
        let closed = self
            .slots
            .iter()
            .flatten()
            .filter_map(|&id| files.release(id))
            .collect();
        self.slots.clear();
        closed
    }

    /// The open descriptors and their files, lowest first.
    pub fn iter(&self) -> impl Iterator<Item = (Fd, FileId)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(fd, id)| id.map(|id| (fd as Fd, id)))
    }

    /// The number of open descriptors.
    pub fn count(&self) -> usize {
        self.slots.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_descriptor_and_close() {
        let mut files = OpenFiles::new(16);
        let mut t = FdTable::new(8);
        assert_eq!(t.open(&mut files, 'a'), Ok(0));
        assert_eq!(t.open(&mut files, 'b'), Ok(1));
        assert_eq!(t.open(&mut files, 'c'), Ok(2));
        assert_eq!(t.close(&mut files, 1), Ok(Some('b')));
        assert_eq!(t.close(&mut files, 1), Err(FdError::BadFd));
        assert_eq!(t.open(&mut files, 'd'), Ok(1));
        assert_eq!(files.len(), 3);
        assert_eq!(t.count(), 3);
        assert_eq!(files.get(t.get(1).unwrap()), Some(&'d'));
        assert_eq!(t.get(99), Err(FdError::BadFd));
        assert_eq!(t.close(&mut files, u32::MAX), Err(FdError::BadFd));
    }

    #[test]
    fn limits() {
        let mut files = OpenFiles::new(2);
        let mut t = FdTable::new(3);
        t.open(&mut files, 1).unwrap();
        t.open(&mut files, 2).unwrap();
        assert_eq!(t.open(&mut files, 3), Err((FdError::TooManyFiles, 3)));
        t.dup(&mut files, 0).unwrap();
        assert_eq!(t.dup(&mut files, 0), Err(FdError::TooManyOpen));
        assert_eq!(t.open(&mut files, 4), Err((FdError::TooManyOpen, 4)));
        assert_eq!(t.dup2(&mut files, 0, 3), Err(FdError::BadFd));
        assert!(!files.has_room());
        assert_eq!(FdError::TooManyOpen.errno(), 24);
    }

    #[test]
    fn dup_and_dup2_share_the_open_file() {
        let mut files = OpenFiles::new(16);
        let mut t = FdTable::new(16);
        let a = t.open(&mut files, "a").unwrap();
        let b = t.open(&mut files, "b").unwrap();
        let d = t.dup(&mut files, a).unwrap();
        assert_eq!(d, 2);
        assert_eq!(t.get(d), t.get(a));
        assert_eq!(files.refs(t.get(a).unwrap()), 2);
        // dup2 onto an open descriptor closes it; "b" had one descriptor, so it goes.
        assert_eq!(t.dup2(&mut files, a, b), Ok((b, Some("b"))));
        assert_eq!(files.refs(t.get(a).unwrap()), 3);
        // dup2(fd, fd) does nothing; on a closed fd it fails.
        assert_eq!(t.dup2(&mut files, a, a), Ok((a, None)));
        assert_eq!(files.refs(t.get(a).unwrap()), 3);
        assert_eq!(t.dup2(&mut files, 9, 9), Err(FdError::BadFd));
        // dup2 onto a high, unused number.
        assert_eq!(t.dup2(&mut files, a, 10), Ok((10, None)));
        assert_eq!(t.open(&mut files, "c"), Ok(3));
        assert_eq!(t.close(&mut files, a), Ok(None));
        assert_eq!(t.close(&mut files, b), Ok(None));
        assert_eq!(t.close(&mut files, d), Ok(None));
        assert_eq!(t.close(&mut files, 10), Ok(Some("a")));
        assert_eq!(files.len(), 1);
    }

    #[test]
    fn fork_shares_open_files_and_exit_closes() {
        let mut files = OpenFiles::new(16);
        let mut parent = FdTable::new(16);
        parent.open(&mut files, 'x').unwrap();
        parent.open(&mut files, 'y').unwrap();
        let mut child = parent.fork(&mut files).unwrap();
        assert_eq!(child, parent);
        assert_eq!(files.refs(parent.get(0).unwrap()), 2);
        assert_eq!(child.close(&mut files, 0), Ok(None));
        assert_eq!(parent.close_all(&mut files), alloc::vec!['x']);
        assert_eq!(child.close_all(&mut files), alloc::vec!['y']);
        assert!(files.is_empty());
        assert_eq!(child.count(), 0);
    }

    #[test]
    fn fork_into_an_emptied_table_reuses_it() {
        let mut files = OpenFiles::new(16);
        let mut parent = FdTable::new(16);
        for c in ['a', 'b', 'c'] {
            parent.open(&mut files, c).unwrap();
        }
        // An ended child's table: emptied, with stale limits and capacity.
        let mut ended = FdTable::new(3);
        for c in ['p', 'q', 'r', 's'] {
            let _ = ended.open(&mut files, c);
        }
        let _ = ended.close_all(&mut files);
        let cap = ended.slots.capacity();
        let child = parent.fork_into(&mut files, ended).unwrap();
        assert_eq!(child, parent);
        assert_eq!(child.slots.capacity(), cap, "no allocation");
        assert_eq!(files.refs(parent.get(2).unwrap()), 2);
    }

    mod props {
        use super::super::*;
        use alloc::collections::BTreeMap;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Open(usize),
            Dup(usize, u32),
            Dup2(usize, u32, u32),
            Close(usize, u32),
            Fork(usize),
            Exit(usize),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                any::<usize>().prop_map(Op::Open),
                (any::<usize>(), 0u32..12).prop_map(|(t, f)| Op::Dup(t, f)),
                (any::<usize>(), 0u32..12, 0u32..12).prop_map(|(t, a, b)| Op::Dup2(t, a, b)),
                (any::<usize>(), 0u32..12).prop_map(|(t, f)| Op::Close(t, f)),
                any::<usize>().prop_map(Op::Fork),
                any::<usize>().prop_map(Op::Exit),
            ]
        }

        proptest! {
            #[test]
            fn never_hands_out_a_used_fd_and_counts_match(ops in proptest::collection::vec(op(), 0..200)) {
                let mut files: OpenFiles<u32> = OpenFiles::new(64);
                let mut tables = alloc::vec![FdTable::new(10)];
                let mut next_obj = 0u32;
                for op in ops {
                    let n = tables.len();
                    match op {
                        Op::Open(t) => {
                            let t = &mut tables[t % n];
                            let used: BTreeMap<Fd, FileId> = t.iter().collect();
                            if let Ok(fd) = t.open(&mut files, next_obj) {
                                prop_assert!(!used.contains_key(&fd));
                                prop_assert!((0..fd).all(|f| used.contains_key(&f)));
                            } else {
                                prop_assert!(used.len() == 10 || !files.has_room());
                            }
                            next_obj += 1;
                        }
                        Op::Dup(t, fd) => {
                            let t = &mut tables[t % n];
                            let used: BTreeMap<Fd, FileId> = t.iter().collect();
                            match t.dup(&mut files, fd) {
                                Ok(new) => {
                                    prop_assert!(!used.contains_key(&new));
                                    prop_assert!((0..new).all(|f| used.contains_key(&f)));
                                    prop_assert_eq!(t.get(new), Ok(used[&fd]));
                                }
                                Err(e) => prop_assert!(
                                    (e == FdError::BadFd && !used.contains_key(&fd))
                                        || (e == FdError::TooManyOpen && used.len() == 10)),
                            }
                        }
                        Op::Dup2(t, a, b) => {
                            let t = &mut tables[t % n];
                            let ok = t.get(a).is_ok() && b < 10;
                            let r = t.dup2(&mut files, a, b);
                            prop_assert_eq!(r.is_ok(), ok);
                            if ok { prop_assert_eq!(t.get(a), t.get(b)); }
                        }
                        Op::Close(t, fd) => {
                            let t = &mut tables[t % n];
                            let was = t.get(fd).is_ok();
                            prop_assert_eq!(t.close(&mut files, fd).is_ok(), was);
                            prop_assert!(t.get(fd).is_err());
                        }
                        Op::Fork(t) => {
                            if n < 6 {
                                let c = tables[t % n].fork(&mut files).unwrap();
                                tables.push(c);
                            }
                        }
                        Op::Exit(t) => {
                            if n > 1 {
                                let mut gone = tables.swap_remove(t % n);
                                gone.close_all(&mut files);
                            }
                        }
                    }
                    // Every open file's count is the number of descriptors naming it.
                    let mut refs: BTreeMap<FileId, u32> = BTreeMap::new();
                    for t in &tables {
                        for (_, id) in t.iter() { *refs.entry(id).or_default() += 1; }
                    }
                    prop_assert_eq!(files.len(), refs.len());
                    for (id, n) in refs { prop_assert_eq!(files.refs(id), n); }
                }
            }
        }
    }
}
