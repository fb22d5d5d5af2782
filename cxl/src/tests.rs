//! The region against a model: format and attach, two nodes sharing checkpoints, a full region
//! and directory, corruption, dead nodes; a node killed after every one of its operations
//! (`crash`), and another node acting between every two operations of one (`interleave`).

use super::*;
use crate::header::{SLOTS, encode_for_test};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

mod crash;
mod interleave;

/// 14 data pages.
const SMALL: usize = 128 * 1024;
/// 46 data pages.
const MID: usize = 256 * 1024;
const FEATURES: u64 = 0b1011;

type View = Attached<VecRegion>;

fn view(region: &VecRegion) -> View {
    Attached::attach(region.share(), FEATURES).unwrap()
}

/// A fresh region, formatted by a first node that joins it (id 2).
fn cluster(len: usize) -> (VecRegion, View, Node) {
    let region = VecRegion::new(len);
    let (b, formatted) = Attached::format_or_attach(region.share(), FEATURES).unwrap();
    assert!(formatted);
    let bn = b.join(2).unwrap();
    (region, b, bn)
}

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31) ^ (i as u8).wrapping_add((i >> 8) as u8))
        .collect()
}

fn padded(data: &[u8]) -> Vec<u8> {
    let mut page = data.to_vec();
    page.resize(PAGE as usize, 0);
    page
}

/// What a checkpoint should hold.
#[derive(Clone, Debug)]
struct Model {
    name: String,
    pages: Vec<Vec<u8>>,
    image: Vec<u8>,
}

impl Model {
    fn new(name: &str, seed: u8, sizes: &[usize], image_len: usize) -> Model {
        Model {
            name: String::from(name),
            pages: (0..sizes.len())
                .map(|i| bytes(seed.wrapping_add(i as u8), sizes[i]))
                .collect(),
            image: bytes(seed ^ 0x5a, image_len),
        }
    }

    /// Data pages it takes: its pages, its image's and its page list's.
    fn footprint(&self) -> u64 {
        let entries = self.pages.len() as u64 + (self.image.len() as u64).div_ceil(PAGE);
        entries + (entries * 8).div_ceil(PAGE)
    }
}

fn write(cx: &View, node: Node, m: &Model) -> Result<Cid, CxlError> {
    let mut w = cx.begin(&m.name, 7, Kind::Function, node)?;
    for p in &m.pages {
        w.push_page(p)?;
    }
    w.write_image(&m.image)?;
    w.publish()
}

fn check(r: &Reader<VecRegion>, m: &Model) {
    assert_eq!(r.info().name, m.name);
    assert_eq!(r.pages(), m.pages.len() as u64);
    for (i, want) in m.pages.iter().enumerate() {
        let mut buf = vec![0u8; PAGE as usize];
        r.page(i as u64, &mut buf).unwrap();
        assert_eq!(buf, padded(want), "page {i}");
    }
    assert_eq!(r.image(), &m.image[..]);
}

/// The directory and the owner table agree, with no node midway: every taken page belongs to a
/// slot in its epoch that is not Free, every published or retired slot loads and owns exactly
/// the pages it lists, and the free count is the rest.
fn audit(cx: &View) {
    audit_with(cx, false);
}

/// As [`audit`], orphan pages (of a slot since freed, left for a sweep) allowed: what holds at
/// every moment is that no page of a published or retired checkpoint is free or another's.
fn audit_with(cx: &View, orphans: bool) {
    let pages = cx.header().layout.data_pages;
    let mut owned = 0;
    for p in 0..pages as u32 {
        if let Some(o) = cx.page_owner(p) {
            owned += 1;
            let s = cx.slot_state(o.slot).expect("the owner names a slot");
            if !orphans {
                assert_eq!(s.epoch, o.epoch, "page {p} of an older epoch");
                assert_ne!(s.state, State::Free, "page {p} of a free slot");
            }
        }
    }
    let (mut listed, mut unsettled) = (0, false);
    for slot in 0..SLOTS {
        let s = cx.slot_state(slot).unwrap();
        match s.state {
            State::Ready | State::Dead => {
                let loaded = cx.load(Cid {
                    slot,
                    epoch: s.epoch,
                });
                let loaded = loaded.expect("a published checkpoint loads");
                let run = loaded.list.map_or(0..0, |(f, n)| f..f + n as u32);
                for p in loaded.entries.iter().map(|e| e.page).chain(run) {
                    let owner = Owner {
                        slot,
                        epoch: s.epoch,
                    };
                    assert_eq!(cx.page_owner(p), Some(owner));
                    listed += 1;
                }
            }
            State::Writing | State::Freeing => unsettled = true,
            State::Free => {}
        }
    }
    if !unsettled && !orphans {
        assert_eq!(owned, listed, "pages owned but not listed");
    }
    assert_eq!(cx.free_pages() + owned, pages);
}

#[test]
fn a_region_is_formatted_once_and_attached_by_every_node() {
    let region = VecRegion::new(SMALL);
    let header = format(&region, FEATURES).unwrap();
    assert_eq!(header.region_size, SMALL as u64);
    assert_eq!(header.page_size, 4096);
    assert_eq!(header.features, FEATURES);
    assert_eq!(header.layout.data_pages, 14);
    // A node with more features attaches; a second format is refused; format_or_attach attaches.
    let a = Attached::attach(region.share(), FEATURES | 0x100).unwrap();
    assert_eq!(*a.header(), header);
    assert_eq!(format(&region, FEATURES), Err(AttachError::NotBlank));
    let (b, formatted) = Attached::format_or_attach(region.share(), FEATURES).unwrap();
    assert!(!formatted);
    assert_eq!(b.free_pages(), 14);
    // 256 MiB, the size the cluster uses, is laid out to the last byte.
    let big = Layout::for_size(256 << 20).unwrap();
    assert_eq!(big.data_pages, 65_391);
    assert_eq!(big.data + big.data_pages * PAGE, 256 << 20);
    assert!(big.owners_len >= big.data_pages * 8);
    for bad in [SMALL + 1, 4096, 68 * 1024] {
        assert_eq!(format(&VecRegion::new(bad), 0), Err(AttachError::BadSize));
    }
}

/// Writes `fixed` (a header's 128 bytes) over the region's header.
fn put_header(region: &VecRegion, fixed: &[u8]) {
    region.share().write(0, fixed);
}

#[test]
fn every_refusal_to_attach_leaves_the_region_untouched() {
    let refuse = |region: &VecRegion, features: u64, want: AttachError| {
        let before = region.snapshot();
        assert_eq!(Attached::attach(region.share(), features).err(), Some(want));
        assert_eq!(region.snapshot(), before, "{want:?} changed the region");
    };
    refuse(&VecRegion::new(SMALL), FEATURES, AttachError::NotFormatted);
    let region = VecRegion::new(SMALL);
    let header = format(&region, FEATURES).unwrap();
    // A few checkpoints' worth of state, so that "untouched" means something.
    let b = view(&region);
    let bn = b.join(1).unwrap();
    write(&b, bn, &Model::new("f", 1, &[10, 4096], 100)).unwrap();
    refuse(&region, 0b0011, AttachError::MissingFeatures(0b1000));
    refuse(&region, 0, AttachError::MissingFeatures(FEATURES));
    region.corrupt(0, 0x20);
    refuse(&region, FEATURES, AttachError::BadMagic);
    region.corrupt(0, 0x20);
    for at in [16, 24, 33, 72, 100, 125] {
        region.corrupt(at, 0x04);
        refuse(&region, FEATURES, AttachError::BadCrc);
        region.corrupt(at, 0x04);
    }
    let good = encode_for_test(&header);
    put_header(
        &region,
        &encode_for_test(&Header {
            version: 9,
            ..header
        }),
    );
    refuse(&region, FEATURES, AttachError::Version(9));
    let mut layout = header.layout;
    layout.data_pages -= 1;
    put_header(&region, &encode_for_test(&Header { layout, ..header }));
    refuse(&region, FEATURES, AttachError::BadLayout);
    put_header(
        &region,
        &encode_for_test(&Header {
            page_size: 8192,
            ..header
        }),
    );
    refuse(&region, FEATURES, AttachError::BadLayout);
    put_header(&region, &good);
    // The same header on a region of another size.
    let bigger = VecRegion::new(MID);
    put_header(&bigger, &good);
    refuse(
        &bigger,
        FEATURES,
        AttachError::SizeMismatch {
            header: SMALL as u64,
            region: MID as u64,
        },
    );
    // A region whose formatter is midway (or died there).
    let claimed = VecRegion::new(SMALL);
    claimed.share().write(0, b"FJORDFMT");
    refuse(&claimed, FEATURES, AttachError::Formatting);
    let before = claimed.snapshot();
    assert_eq!(format(&claimed, FEATURES), Err(AttachError::NotBlank));
    assert_eq!(claimed.snapshot(), before);
    // Restored, it attaches again.
    Attached::attach(region.share(), FEATURES).unwrap();
}

#[test]
fn a_formatter_killed_at_any_step_leaves_a_region_that_is_blank_claimed_or_whole() {
    for k in 0.. {
        let region = VecRegion::new(SMALL);
        let formatter = region.share();
        formatter.crash_after(k);
        let _ = format(&formatter, FEATURES);
        match Attached::attach(region.share(), FEATURES) {
            Ok(a) => assert_eq!(a.free_pages(), 14),
            Err(AttachError::NotFormatted) => {
                // Another node can format it.
                assert!(formatter.crashed());
                format(&region.share(), FEATURES).unwrap();
            }
            Err(AttachError::Formatting) => assert!(formatter.crashed()),
            Err(e) => panic!("step {k}: {e:?}"),
        }
        if !formatter.crashed() {
            break;
        }
    }
}

#[test]
fn two_nodes_write_and_read_each_others_checkpoints() {
    let (region, b, bn) = cluster(MID);
    let a = view(&region);
    let an = a.join(1).unwrap();
    assert_ne!(an, bn);
    let ids: Vec<u32> = a.nodes().iter().map(|n| n.id).collect();
    assert_eq!(ids, [2, 1]);
    assert_eq!(a.heartbeat(an), 1);
    assert_eq!(b.node_info(an).unwrap().heartbeat, 1);
    let fa = Model::new("fa", 1, &[4096, 1, 0], 5000);
    let fb = Model::new("fb", 2, &[100], 0);
    let ca = write(&a, an, &fa).unwrap();
    let cb = write(&b, bn, &fb).unwrap();
    for cx in [&a, &b] {
        let names: Vec<String> = cx.list().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["fa", "fb"]);
    }
    let listed = b.list();
    assert_eq!(listed[0].writer, an);
    assert_eq!(listed[0].pages, 3);
    assert_eq!(listed[0].image_len, 5000);
    assert_eq!(listed[0].generation, 7);
    assert_eq!(listed[0].kind, Kind::Function);
    // Clones on both nodes: the count is the cluster's.
    let r1 = b.open(ca, bn).unwrap();
    let r2 = b.open(ca, bn).unwrap();
    let r3 = a.open(ca, an).unwrap();
    let r4 = a.open(cb, an).unwrap();
    check(&r1, &fa);
    check(&r3, &fa);
    check(&r4, &fb);
    r1.verify().unwrap();
    let first = a.load(ca).unwrap().entries[0].page;
    assert_eq!(r1.page_offset(0), Some(a.page_offset(first)));
    assert_eq!(a.refcount(ca), Some(3));
    assert_eq!(a.refcount(cb), Some(1));
    drop(r1);
    r3.close();
    assert_eq!(b.refcount(ca), Some(1));
    r2.close();
    r4.close();
    assert_eq!(b.refcount(ca), Some(0));
    assert_eq!(b.refcount(cb), Some(0));
    audit(&a);
}

#[test]
fn a_retired_checkpoint_is_freed_by_its_last_close() {
    let (region, b, bn) = cluster(MID);
    let a = view(&region);
    let an = a.join(1).unwrap();
    let all = b.free_pages();
    let m = Model::new("f", 3, &[4096, 4096, 17], 4097);
    let cid = write(&a, an, &m).unwrap();
    assert_eq!(b.free_pages(), all - m.footprint());
    let held = b.open(cid, bn).unwrap();
    a.retire(cid, an).unwrap();
    assert!(b.list().is_empty());
    assert_eq!(b.open(cid, bn).err(), Some(CxlError::Retired));
    assert_eq!(a.retire(cid, an), Err(CxlError::Retired));
    // The clone goes on reading it, and its pages stay taken.
    check(&held, &m);
    assert_eq!(b.free_pages(), all - m.footprint());
    audit(&b);
    held.close();
    assert_eq!(b.free_pages(), all);
    assert_eq!(b.slot_state(cid.slot).unwrap().state, State::Free);
    // Freed in its own epoch: known to have been retired.
    assert_eq!(b.open(cid, bn).err(), Some(CxlError::Retired));
    assert_eq!(b.retire(cid, bn), Err(CxlError::NotFound));
    // No clone: retiring frees at once; the slot's next checkpoint has a new identity.
    let again = write(&b, bn, &m).unwrap();
    assert_eq!(again.slot, cid.slot);
    assert_ne!(again.epoch, cid.epoch);
    assert_eq!(a.open(cid, an).err(), Some(CxlError::NotFound));
    b.retire(again, bn).unwrap();
    assert_eq!(a.free_pages(), all);
    audit(&a);
}

#[test]
fn a_full_region_and_a_full_directory_say_so_and_stay_consistent() {
    let (_region, b, bn) = cluster(SMALL);
    let page = [9u8; 4096];
    // A writer that runs out of pages keeps what it has; dropped, it gives it all back.
    let mut w = b.begin("big", 1, Kind::Uprocess, bn).unwrap();
    for _ in 0..14 {
        w.push_page(&page).unwrap();
    }
    assert_eq!(w.push_page(&page), Err(CxlError::RegionFull));
    assert_eq!(w.pages(), 14);
    // No page left for the page list either.
    assert_eq!(w.publish(), Err(CxlError::RegionFull));
    assert_eq!(b.free_pages(), 14);
    audit(&b);
    // 13 pages and their list fill it exactly.
    let m = Model::new("fits", 4, &[4096; 13], 0);
    let cid = write(&b, bn, &m).unwrap();
    assert_eq!(b.free_pages(), 0);
    let mut w = b.begin("more", 1, Kind::Function, bn).unwrap();
    assert_eq!(w.write_image(b"x"), Err(CxlError::RegionFull));
    w.abort();
    check(&b.open(cid, bn).unwrap(), &m);
    b.retire(cid, bn).unwrap();
    assert_eq!(b.free_pages(), 14);
    // Every slot taken.
    let writers: Vec<_> = (0..SLOTS)
        .map(|_| b.begin("w", 1, Kind::Function, bn).unwrap())
        .collect();
    assert_eq!(
        b.begin("w", 1, Kind::Function, bn).err(),
        Some(CxlError::DirectoryFull)
    );
    drop(writers);
    let cid = write(&b, bn, &Model::new("after", 5, &[3], 3)).unwrap();
    assert_eq!(b.list().len(), 1);
    assert_eq!(cid.slot, 0);
    audit(&b);
    // Arguments out of range.
    let long = "x".repeat(MAX_NAME + 1);
    for name in ["", long.as_str()] {
        assert_eq!(
            b.begin(name, 1, Kind::Function, bn).err(),
            Some(CxlError::BadName)
        );
    }
    let mut w = b.begin(&long[..MAX_NAME], 1, Kind::Function, bn).unwrap();
    assert_eq!(w.push_page(&[0; 4097]), Err(CxlError::BadLength));
    drop(w);
    let r = b.open(cid, bn).unwrap();
    let mut small = [0u8; 100];
    assert_eq!(r.page(0, &mut small), Err(CxlError::BadLength));
    assert_eq!(r.page(1, &mut [0; 4096]), Err(CxlError::OutOfRange));
    assert_eq!(r.page_offset(1), None);
    let bad = Cid {
        slot: SLOTS,
        epoch: 1,
    };
    assert_eq!(b.open(bad, bn).err(), Some(CxlError::NotFound));
}

#[test]
fn the_node_table_fills_and_frees() {
    let (region, b, _) = cluster(SMALL);
    let a = view(&region);
    let joined: Vec<Node> = (1..16).map(|id| a.join(id).unwrap()).collect();
    assert_eq!(a.join(99), Err(CxlError::NodeTableFull));
    let report = b.leave(joined[3]);
    assert_eq!(report.nodes_released, 1);
    assert_eq!(a.join(99), Ok(joined[3]));
    assert_eq!(a.node_info(joined[3]).unwrap().joins, 2);
    assert_eq!(b.nodes().len(), 16);
}

#[test]
fn corruption_anywhere_in_a_checkpoint_is_refused_never_returned() {
    let (region, b, bn) = cluster(MID);
    let m = Model::new("f", 6, &[4096, 4096], 6000);
    let cid = write(&b, bn, &m).unwrap();
    let all = b.free_pages() + m.footprint();
    let loaded = b.load(cid).unwrap();
    let slot = b.slot_at(cid.slot);
    let meta = slot + directory::META;
    let list = b.page_offset(loaded.list.unwrap().0);
    let data = b.page_offset(loaded.entries[1].page);
    let image = b.page_offset(loaded.entries[3].page);
    // Metadata (name, counts, the CRC itself) and page list: not listed, not opened.
    for at in [
        meta,
        meta + 8,
        meta + 24,
        meta + 44,
        meta + 117,
        list,
        list + 13,
    ] {
        region.corrupt(at, 0x10);
        assert!(b.list().is_empty(), "corruption at {at} listed");
        assert_eq!(b.open(cid, bn).err(), Some(CxlError::Corrupt));
        assert_eq!(b.refcount(cid), Some(0));
        region.corrupt(at, 0x10);
    }
    // The image, whole when opened.
    region.corrupt(image + 1000, 1);
    assert_eq!(b.open(cid, bn).err(), Some(CxlError::Corrupt));
    region.corrupt(image + 1000, 1);
    // A data page, when read.
    let r = b.open(cid, bn).unwrap();
    region.corrupt(data + 4095, 0x80);
    assert_eq!(r.page(1, &mut [0; 4096]), Err(CxlError::Corrupt));
    assert_eq!(r.verify(), Err(CxlError::Corrupt));
    r.page(0, &mut [0; 4096]).unwrap();
    drop(r);
    region.corrupt(data + 4095, 0x80);
    // A state word that decodes to nothing.
    region.corrupt(slot, 0x07);
    assert_eq!(b.open(cid, bn).err(), Some(CxlError::Corrupt));
    assert!(b.list().is_empty());
    region.corrupt(slot, 0x07);
    check(&b.open(cid, bn).unwrap(), &m);
    // Retired with its list unreadable, its pages are found by their owner tags.
    region.corrupt(meta, 1);
    b.retire(cid, bn).unwrap();
    assert_eq!(b.free_pages(), all);
}

#[test]
fn a_dead_nodes_clones_and_writes_are_collected() {
    let (region, b, bn) = cluster(MID);
    let all = b.free_pages();
    let a = view(&region);
    let an = a.join(1).unwrap();
    let m = Model::new("f", 7, &[1, 2], 3);
    let cid = write(&b, bn, &m).unwrap();
    // `a` holds a clone and is midway through a checkpoint when it dies.
    let held = a.open(cid, an).unwrap();
    let mut w = a.begin("g", 1, Kind::Function, an).unwrap();
    w.push_page(&[1; 10]).unwrap();
    a.region().crash_after(0);
    drop(w);
    drop(held);
    b.retire(cid, bn).unwrap();
    assert_eq!(b.refcount(cid), Some(1));
    assert_eq!(b.free_pages(), all - m.footprint() - 1);
    // Alive, it keeps everything.
    assert_eq!(b.gc(bn, |_| true), GcReport::default());
    let report = b.gc(bn, |n| n == bn);
    assert_eq!(report.refs_dropped, 1);
    assert_eq!(report.slots_freed, 2);
    assert_eq!(report.pages_freed, m.footprint() + 1);
    assert_eq!(report.nodes_released, 1);
    assert_eq!(b.free_pages(), all);
    assert_eq!(b.nodes().len(), 1);
    audit(&b);
}

#[test]
fn a_writer_wrongly_called_dead_cannot_publish() {
    let (region, b, bn) = cluster(MID);
    let all = b.free_pages();
    let a = view(&region);
    let an = a.join(1).unwrap();
    let mut w = a.begin("g", 1, Kind::Function, an).unwrap();
    w.push_page(&[1; 10]).unwrap();
    b.gc(bn, |n| n == bn);
    assert_eq!(b.free_pages(), all);
    w.push_page(&[2; 10]).unwrap();
    w.write_image(b"image").unwrap();
    assert_eq!(w.publish(), Err(CxlError::BadState));
    assert!(b.list().is_empty());
    assert_eq!(b.free_pages(), all);
    audit(&b);
}
