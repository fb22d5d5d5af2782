//! The store against a model: every operation, and a crash after any number of block writes
//! (the interrupted write torn or not) leaving each file as it was or as it was to become.

use super::*;
use alloc::collections::BTreeMap;
use alloc::string::ToString;
use proptest::prelude::*;

/// A device in memory that can stop writing after a number of block writes, optionally tearing
/// the last one (half of it written).
#[derive(Clone)]
struct Ram {
    blocks: Vec<Vec<u8>>,
    /// Writes still allowed before the "crash" (`None`: no crash).
    budget: Option<usize>,
    tear: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Crashed;

impl Ram {
    fn new(blocks: usize) -> Ram {
        Ram {
            blocks: vec![vec![0; BLOCK]; blocks],
            budget: None,
            tear: false,
        }
    }
}

impl BlockDevice for Ram {
    type Error = Crashed;
    fn blocks(&self) -> u64 {
        self.blocks.len() as u64
    }
    fn read_block(&mut self, n: u64, buf: &mut [u8]) -> Result<(), Crashed> {
        buf.copy_from_slice(&self.blocks[n as usize]);
        Ok(())
    }
    fn write_block(&mut self, n: u64, data: &[u8]) -> Result<(), Crashed> {
        match self.budget {
            Some(0) => Err(Crashed),
            Some(1) if self.tear => {
                self.blocks[n as usize][..BLOCK / 2].copy_from_slice(&data[..BLOCK / 2]);
                self.budget = Some(0);
                Err(Crashed)
            }
            _ => {
                self.blocks[n as usize].copy_from_slice(data);
                self.budget = self.budget.map(|b| b - 1);
                Ok(())
            }
        }
    }
    fn flush(&mut self) -> Result<(), Crashed> {
        match self.budget {
            Some(0) => Err(Crashed),
            _ => Ok(()),
        }
    }
}

#[test]
fn files_are_written_read_renamed_and_removed() {
    let mut fs = FileStore::format(Ram::new(64)).unwrap();
    assert_eq!(fs.free_blocks(), 56);
    fs.write("a", b"hello").unwrap();
    fs.write("big", &vec![7u8; 3 * BLOCK + 1]).unwrap();
    fs.write("empty", b"").unwrap();
    assert_eq!(fs.read("a").unwrap(), b"hello");
    assert_eq!(fs.read("big").unwrap().len(), 3 * BLOCK + 1);
    assert_eq!(fs.read("empty").unwrap(), b"");
    assert_eq!(fs.free_blocks(), 56 - 1 - 4);
    fs.write("a", b"hello again").unwrap();
    fs.rename("a", "b").unwrap();
    assert_eq!(fs.read("a"), Err(FsError::NotFound));
    assert_eq!(fs.read("b").unwrap(), b"hello again");
    // Renaming over a file replaces it.
    fs.rename("b", "big").unwrap();
    assert_eq!(fs.read("big").unwrap(), b"hello again");
    assert_eq!(fs.files().len(), 2);
    fs.remove("big").unwrap();
    assert_eq!(fs.remove("big"), Err(FsError::NotFound));
    // What was written is what a new mount finds.
    let generation = fs.generation();
    let mut again = FileStore::mount(fs.into_device()).unwrap();
    assert_eq!(again.generation(), generation);
    assert_eq!(again.files().len(), 1);
    assert_eq!(again.read("empty").unwrap(), b"");
}

#[test]
fn a_streamed_file_is_named_only_at_commit_and_holds_every_append() {
    let mut fs = FileStore::format(Ram::new(64)).unwrap();
    fs.write("dump", b"old").unwrap();
    let d = fs.create("dump").unwrap();
    let mut want = Vec::new();
    for (i, n) in [1usize, 4095, 4097, 3, 8192, 10].into_iter().enumerate() {
        let chunk: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
        fs.append(d, &chunk).unwrap();
        want.extend_from_slice(&chunk);
    }
    // A whole-file write meanwhile finds room beside the draft's reservation.
    fs.write("other", &[5; 100]).unwrap();
    assert_eq!(fs.read("dump").unwrap(), b"old");
    fs.commit(d).unwrap();
    assert_eq!(fs.read("dump").unwrap(), want);
    // Appending after a commit leaves the committed version whole until the next commit.
    fs.append(d, b"more").unwrap();
    assert_eq!(fs.read("dump").unwrap(), want);
    fs.commit(d).unwrap();
    want.extend_from_slice(b"more");
    assert_eq!(fs.read("dump").unwrap(), want);
    fs.discard(d);
    let mut again = FileStore::mount(fs.into_device()).unwrap();
    assert_eq!(again.read("dump").unwrap(), want);
    assert_eq!(again.read("other").unwrap(), [5; 100]);
}

#[test]
fn drafts_share_the_free_space_and_a_full_one_says_so() {
    let mut fs = FileStore::format(Ram::new(8 + 16)).unwrap();
    let a = fs.create("a").unwrap();
    fs.append(a, &[1; 2 * BLOCK]).unwrap();
    // The second draft takes half of the first one's room.
    let b = fs.create("b").unwrap();
    fs.append(b, &[2; 7 * BLOCK]).unwrap();
    assert_eq!(fs.append(b, &[2; 1]), Err(FsError::NoSpace));
    fs.append(a, &[1; 7 * BLOCK]).unwrap();
    assert_eq!(fs.append(a, &[1; 1]), Err(FsError::NoSpace));
    fs.commit(a).unwrap();
    fs.commit(b).unwrap();
    assert_eq!(fs.read("a").unwrap(), vec![1; 9 * BLOCK]);
    assert_eq!(fs.read("b").unwrap(), vec![2; 7 * BLOCK]);
    // Full drafts leave no room; ended ones give it back (their files keep their blocks).
    assert_eq!(fs.create("c").err(), Some(FsError::NoSpace));
    fs.discard(a);
    fs.discard(b);
    fs.remove("a").unwrap();
    // Discarded without a commit: nothing named, the reservation free again.
    let c = fs.create("c").unwrap();
    fs.append(c, &[3; 9 * BLOCK]).unwrap();
    fs.discard(c);
    assert_eq!(fs.read("c"), Err(FsError::NotFound));
    assert_eq!(fs.create("bad\0name").err(), Some(FsError::BadName));
}

#[test]
fn a_crash_during_a_streamed_save_leaves_the_old_file() {
    for budget in 0..12 {
        let mut fs = FileStore::format(Ram::new(64)).unwrap();
        fs.write("dump", b"previous").unwrap();
        let mut dev = fs.into_device();
        dev.budget = Some(budget);
        dev.tear = budget % 2 == 1;
        let mut fs = FileStore::mount(dev).unwrap();
        let done = fs
            .create("dump")
            .and_then(|d| fs.append(d, &[9; 3 * BLOCK + 5]).map(|()| d))
            .and_then(|d| fs.commit(d));
        let mut dev = fs.into_device();
        dev.budget = None;
        let mut after = FileStore::mount(dev).unwrap();
        let got = after.read("dump").unwrap();
        match done {
            Ok(()) => assert_eq!(got, vec![9; 3 * BLOCK + 5], "budget {budget}"),
            Err(_) => assert!(
                got == b"previous" || got == vec![9; 3 * BLOCK + 5],
                "budget {budget}: {got:?}"
            ),
        }
    }
}

#[test]
fn bad_names_full_directories_and_full_disks_are_refused() {
    let mut fs = FileStore::format(Ram::new(14)).unwrap();
    for bad in ["", "nul\0", &"x".repeat(MAX_NAME + 1)] {
        assert_eq!(fs.write(bad, b"x"), Err(FsError::BadName), "{bad:?}");
    }
    assert_eq!(fs.write("huge", &vec![0; 7 * BLOCK]), Err(FsError::NoSpace));
    fs.write("five", &vec![1; 5 * BLOCK]).unwrap();
    // Replacing a file needs room for both copies until the new one is in place.
    assert_eq!(fs.write("five", &vec![2; 5 * BLOCK]), Err(FsError::NoSpace));
    assert_eq!(fs.read("five").unwrap(), vec![1; 5 * BLOCK]);
    let mut fs = FileStore::format(Ram::new(14)).unwrap();
    for i in 0..MAX_FILES {
        fs.write(&i.to_string(), b"").unwrap();
    }
    assert_eq!(fs.write("one more", b""), Err(FsError::TooManyFiles));
    fs.write("0", b"").unwrap();
}

#[test]
fn an_unformatted_or_foreign_device_is_refused_and_a_corrupt_file_reported() {
    assert!(matches!(
        FileStore::mount(Ram::new(14)),
        Err(FsError::NotFormatted)
    ));
    assert!(matches!(
        FileStore::mount(Ram::new(8)),
        Err(FsError::TooSmall)
    ));
    let (fs, formatted) = FileStore::mount_or_format(Ram::new(14)).unwrap();
    assert!(formatted);
    let (mut fs, formatted) = FileStore::mount_or_format(fs.into_device()).unwrap();
    assert!(!formatted);
    // A device holding something else is not formatted over.
    let mut foreign = Ram::new(14);
    foreign.blocks[3][100] = 1;
    assert!(matches!(
        FileStore::mount_or_format(foreign),
        Err(FsError::NotFormatted)
    ));
    fs.write("f", b"contents").unwrap();
    let start = fs.stat("f").unwrap().start;
    let mut dev = fs.into_device();
    dev.blocks[start as usize][0] ^= 1;
    let mut fs = FileStore::mount(dev).unwrap();
    assert_eq!(fs.read("f"), Err(FsError::Corrupt));
    // A directory of another version is named as such.
    let mut dev = fs.into_device();
    for slot in 0..2u64 {
        let mut copy = read_copy(&mut dev, slot).unwrap();
        copy[8..12].copy_from_slice(&9u32.to_le_bytes());
        let crc = crc32fast::hash(&copy[..COPY - 4]);
        copy[COPY - 4..].copy_from_slice(&crc.to_le_bytes());
        write_copy(&mut dev, slot, &copy).unwrap();
    }
    assert!(matches!(FileStore::mount(dev), Err(FsError::Version(9))));
}

#[test]
fn a_reader_sees_the_version_it_opened_in_any_pieces_until_it_closes() {
    let mut fs = FileStore::format(Ram::new(8 + 2 * READ_RUN + 8)).unwrap();
    // Longer than one device request, ending mid-block.
    let old: Vec<u8> = (0..READ_RUN * BLOCK + 3 * BLOCK + 17)
        .map(|i| (i * 7 + i / 4093) as u8)
        .collect();
    fs.write("dump", &old).unwrap();
    let (r, len) = fs.open("dump").unwrap();
    assert_eq!(len, old.len() as u64);
    // Replaced and then removed: the reader still reads the old version, whose blocks no new
    // file may take meanwhile.
    fs.write("dump", b"new").unwrap();
    fs.remove("dump").unwrap();
    assert_eq!(
        fs.write("fill", &vec![1u8; (READ_RUN + 6) * BLOCK]),
        Err(FsError::NoSpace)
    );
    let mut got = Vec::new();
    let mut at = 0u64;
    for piece in [1usize, 4095, 4097, 10_000, 300_000, 7].iter().cycle() {
        let mut buf = vec![0u8; *piece];
        let n = fs.read_at(r, at, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    assert_eq!(got, old);
    assert_eq!(fs.read_at(r, len + 5, &mut [0u8; 8]).unwrap(), 0);
    fs.close(r);
    assert_eq!(fs.read_at(r, 0, &mut [0u8; 8]), Err(FsError::NotFound));
    // Closed: its blocks are free again.
    fs.write("fill", &vec![1u8; (READ_RUN + 6) * BLOCK])
        .unwrap();
    assert!(matches!(fs.open("dump"), Err(FsError::NotFound)));
}

#[test]
fn opening_a_corrupt_file_for_reading_is_refused() {
    let mut fs = FileStore::format(Ram::new(8 + 4)).unwrap();
    fs.write("f", &[3u8; BLOCK + 1]).unwrap();
    let start = fs.stat("f").unwrap().start;
    let mut dev = fs.into_device();
    dev.blocks[start as usize + 1][0] ^= 1;
    let mut fs = FileStore::mount(dev).unwrap();
    assert!(matches!(fs.open("f"), Err(FsError::Corrupt)));
    // Refused readers hold nothing.
    assert!(fs.readers.iter().all(Option::is_none));
}

#[derive(Clone, Debug)]
enum Op {
    Write(u8, usize),
    Rename(u8, u8),
    Remove(u8),
}

fn name(n: u8) -> String {
    alloc::format!("f{}", n % 4)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<u8>(), 0usize..3 * BLOCK).prop_map(|(n, l)| Op::Write(n, l)),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Rename(a, b)),
        any::<u8>().prop_map(Op::Remove),
    ]
}

/// Applies `op` to the model as the store would.
fn apply(model: &mut BTreeMap<String, Vec<u8>>, op: &Op, seq: u8) {
    match op {
        Op::Write(n, len) => {
            model.insert(name(*n), vec![seq; *len]);
        }
        Op::Rename(a, b) => {
            if let Some(v) = model.remove(&name(*a)) {
                model.insert(name(*b), v);
            }
        }
        Op::Remove(n) => {
            model.remove(&name(*n));
        }
    }
}

fn run(fs: &mut FileStore<Ram>, op: &Op, seq: u8) -> Result<(), FsError<Crashed>> {
    match op {
        Op::Write(n, len) => fs.write(&name(*n), &vec![seq; *len]),
        Op::Rename(a, b) => fs.rename(&name(*a), &name(*b)),
        Op::Remove(n) => fs.remove(&name(*n)),
    }
}

fn contents(fs: &mut FileStore<Ram>) -> BTreeMap<String, Vec<u8>> {
    let names: Vec<String> = fs.files().iter().map(|f| f.name.clone()).collect();
    names
        .into_iter()
        .map(|n| {
            let v = fs.read(&n).expect("every listed file reads back whole");
            (n, v)
        })
        .collect()
}

proptest! {
    #[test]
    fn a_crash_leaves_the_store_before_or_after_the_interrupted_change(
        ops in proptest::collection::vec(op(), 1..12),
        crash_after in 0usize..40,
        tear in any::<bool>(),
    ) {
        let mut fs = FileStore::format(Ram::new(30)).unwrap();
        let mut model = BTreeMap::new();
        // Every operation but the last runs to its end; the last runs on a device that stops
        // writing after `crash_after` block writes.
        let (last, before) = ops.split_last().unwrap();
        for (i, op) in before.iter().enumerate() {
            match run(&mut fs, op, i as u8 + 1) {
                Ok(()) => apply(&mut model, op, i as u8 + 1),
                Err(FsError::NotFound | FsError::NoSpace) => {}
                Err(e) => prop_assert!(false, "{op:?}: {e:?}"),
            }
        }
        let seq = ops.len() as u8;
        let mut after = model.clone();
        apply(&mut after, last, seq);
        let mut dev = fs.into_device();
        dev.budget = Some(crash_after);
        dev.tear = tear;
        let mut fs = FileStore::mount(dev).unwrap();
        let finished = run(&mut fs, last, seq).is_ok();
        let mut dev = fs.into_device();
        dev.budget = None;
        let mut remounted = FileStore::mount(dev).unwrap();
        let found = contents(&mut remounted);
        if finished {
            prop_assert_eq!(found, after);
        } else {
            prop_assert!(found == model || found == after, "{found:?}");
        }
    }
}
