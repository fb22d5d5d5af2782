//! A node killed after every one of its operations, its unpersisted writes kept or lost: a
//! writer, a reader (open, retire, close) and a collector.

use super::*;
use proptest::prelude::*;

/// Writes `model` from a node killed after `crash` steps (its unpersisted writes lost if
/// `lose`), while another node holds a checkpoint of its own, then checks what the survivor
/// sees and collects: the writer's steps.
fn kill_a_writer(model: &Model, crash: Option<u64>, lose: bool) -> u64 {
    let (region, b, bn) = cluster(MID);
    let other = Model::new("other", 99, &[100], 10);
    let other_cid = write(&b, bn, &other).unwrap();
    let free_before = b.free_pages();
    let a = view(&region);
    let an = a.join(1).unwrap();
    match crash {
        Some(k) if lose => a.region().crash_after_losing_unpersisted(k),
        Some(k) => a.region().crash_after(k),
        None => {}
    }
    let start = a.region().steps();
    let result = write(&a, an, model);
    let steps = a.region().steps() - start;
    let crashed = a.region().crashed();
    if crash.is_some() {
        // Killed at the latest right after publishing: what it did not persist is lost then.
        a.region().crash();
    }
    // Everything listed opens whole; every published slot is listed.
    let listed = b.list();
    for c in &listed {
        let r = b.open(c.cid, bn).unwrap();
        check(&r, if c.name == model.name { model } else { &other });
    }
    let published = (0..SLOTS)
        .filter(|&s| b.slot_state(s).unwrap().state == State::Ready)
        .count();
    assert_eq!(published, listed.len());
    let mine: Vec<Cid> = listed
        .iter()
        .filter(|c| c.name == model.name)
        .map(|c| c.cid)
        .collect();
    if !crashed {
        assert_eq!(mine, [result.unwrap()]);
    }
    // Nothing taken by a checkpoint is free, nothing free is taken.
    audit(&b);
    // The writer is dead: collect, retire what it published, and every page is back.
    let report = b.gc(bn, |n| n == bn);
    assert_eq!(report.nodes_released, 1);
    for &cid in &mine {
        b.retire(cid, bn).unwrap();
    }
    assert_eq!(b.free_pages(), free_before, "crash after {crash:?}");
    audit(&b);
    // The region goes on working.
    check(&b.open(other_cid, bn).unwrap(), &other);
    let again = write(&b, bn, model).unwrap();
    check(&b.open(again, bn).unwrap(), model);
    steps
}

fn kill_a_writer_at_every_step(model: &Model, lose: bool) {
    let steps = kill_a_writer(model, None, lose);
    for k in 0..=steps {
        kill_a_writer(model, Some(k), lose);
    }
}

#[test]
fn a_writer_killed_at_every_step_leaves_no_bad_checkpoint_and_no_lost_page() {
    let m = Model::new("f", 8, &[4096, 0, 1000], 4097);
    kill_a_writer_at_every_step(&m, false);
    kill_a_writer_at_every_step(&m, true);
    kill_a_writer_at_every_step(&Model::new("empty", 0, &[], 0), true);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn any_checkpoint_survives_its_writer_killed_at_every_step(
        sizes in proptest::collection::vec(0usize..=4096, 0..4),
        image_len in 0usize..9000,
        seed in any::<u8>(),
        lose in any::<bool>(),
    ) {
        kill_a_writer_at_every_step(&Model::new("f", seed, &sizes, image_len), lose);
    }
}

/// One node opens, reads, retires and closes another's checkpoint, killed after `crash` steps:
/// whether it crashed.
fn kill_a_reader(crash: u64, lose: bool) -> bool {
    let (region, b, bn) = cluster(MID);
    let all = b.free_pages();
    let m = Model::new("f", 9, &[4096, 5], 5000);
    let cid = write(&b, bn, &m).unwrap();
    let a = view(&region);
    let an = a.join(1).unwrap();
    if lose {
        a.region().crash_after_losing_unpersisted(crash);
    } else {
        a.region().crash_after(crash);
    }
    if let Ok(r) = a.open(cid, an) {
        let _ = r.verify();
        let _ = a.retire(cid, an);
        r.close();
    }
    let crashed = a.region().crashed();
    a.region().crash();
    audit(&b);
    match b.open(cid, bn) {
        Ok(r) => check(&r, &m),
        Err(e) => assert!(matches!(e, CxlError::Retired | CxlError::NotFound), "{e:?}"),
    }
    b.gc(bn, |n| n == bn);
    let _ = b.retire(cid, bn);
    assert_eq!(b.free_pages(), all, "crash after {crash}");
    audit(&b);
    crashed
}

#[test]
fn a_reader_killed_at_every_step_pins_nothing_after_collection() {
    for lose in [false, true] {
        let mut k = 0;
        while kill_a_reader(k, lose) {
            k += 1;
        }
        assert!(k > 10);
    }
}

#[test]
fn a_collector_killed_at_every_step_leaves_work_the_next_one_finishes() {
    for k in 0.. {
        let (region, b, bn) = cluster(MID);
        let all = b.free_pages();
        let kept = Model::new("kept", 1, &[1], 1);
        let kept_cid = write(&b, bn, &kept).unwrap();
        let cid = write(&b, bn, &Model::new("x", 2, &[1, 2, 3], 10)).unwrap();
        // `a` holds a clone of x and dies midway through a checkpoint; x is retired.
        let a = view(&region);
        let an = a.join(1).unwrap();
        let held = a.open(cid, an).unwrap();
        a.region().crash_after(9);
        let _ = write(&a, an, &Model::new("y", 3, &[4, 5, 6], 7000));
        drop(held);
        b.retire(cid, bn).unwrap();
        // `c` collects and dies after k steps; `b` collects after it.
        let c = view(&region);
        let cn = c.join(3).unwrap();
        c.region().crash_after(k);
        c.gc(cn, |n| n != an);
        audit_with(&b, true);
        b.gc(bn, |n| n == bn);
        assert_eq!(
            b.free_pages(),
            all - kept.footprint(),
            "collector killed after {k}"
        );
        assert_eq!(b.nodes().len(), 1);
        check(&b.open(kept_cid, bn).unwrap(), &kept);
        audit(&b);
        if !c.region().crashed() {
            break;
        }
    }
}
