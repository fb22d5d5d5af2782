//! Another node acting between every two operations of one: open against retire, retire
//! against open, close against retire and against another close.

use super::*;
use alloc::rc::Rc;

/// A checkpoint in a fresh region, and two nodes' views to share with hooks: (the writer's view
/// and node, another view and node, the checkpoint, its model, the region's data pages).
fn two_views() -> (Rc<View>, Node, Rc<View>, Node, Cid, Model, u64) {
    let (region, b, bn) = cluster(MID);
    let all = b.free_pages();
    let m = Model::new("f", 10, &[4096, 9], 100);
    let cid = write(&b, bn, &m).unwrap();
    let a = view(&region);
    let an = a.join(1).unwrap();
    (Rc::new(b), bn, Rc::new(a), an, cid, m, all)
}

#[test]
fn opening_while_another_node_retires_between_any_two_steps() {
    for k in 0.. {
        let (b, bn, a, an, cid, m, all) = two_views();
        let retirer = b.clone();
        let fired = Rc::new(core::cell::Cell::new(false));
        let flag = fired.clone();
        let start = a.region().steps();
        a.region().before_step(start + k, move || {
            retirer.retire(cid, bn).unwrap();
            flag.set(true);
        });
        // Opened, read and closed, the retire coming before any of a's steps.
        match a.open(cid, an) {
            Ok(r) => {
                check(&r, &m);
                assert_eq!(b.free_pages(), all - m.footprint());
            }
            // Retired, or already freed.
            Err(e) => assert!(
                matches!(e, CxlError::Retired | CxlError::NotFound),
                "retired before step {k}: {e:?}"
            ),
        }
        let raced = fired.get();
        if !raced {
            b.retire(cid, bn).unwrap();
        }
        assert_eq!(b.free_pages(), all, "retired before step {k}");
        audit(&b);
        if !raced {
            break;
        }
    }
}

#[test]
fn retiring_while_another_node_opens_between_any_two_steps() {
    for k in 0.. {
        let (b, bn, a, an, cid, m, all) = two_views();
        let opener = a.clone();
        let held = Rc::new(core::cell::Cell::new(false));
        let flag = held.clone();
        let start = b.region().steps();
        b.region().before_step(start + k, move || {
            if let Ok(r) = opener.open(cid, an) {
                check(&r, &m);
                // Kept open past the retire: closed by hand below.
                core::mem::forget(r);
                flag.set(true);
            }
        });
        b.retire(cid, bn).unwrap();
        let raced = b.region().steps() - start > k;
        if held.get() {
            assert_eq!(b.refcount(cid), Some(1));
            assert_eq!(a.slot_state(cid.slot).unwrap().state, State::Dead);
            a.drop_ref(cid.slot, an);
        }
        assert_eq!(a.free_pages(), all, "opened before step {k}");
        audit(&a);
        if !raced {
            break;
        }
    }
}

#[test]
fn closing_while_another_node_retires_or_closes_between_any_two_steps() {
    for other_closes in [false, true] {
        for k in 0.. {
            let (b, bn, a, an, cid, _, all) = two_views();
            let mine = a.open(cid, an).unwrap();
            if other_closes {
                // `b` holds a clone too (closed by hand in the hook), and x is retired.
                core::mem::forget(b.open(cid, bn).unwrap());
                b.retire(cid, bn).unwrap();
            }
            let other = b.clone();
            let start = a.region().steps();
            a.region().before_step(start + k, move || {
                if other_closes {
                    other.drop_ref(cid.slot, bn);
                } else {
                    other.retire(cid, bn).unwrap();
                }
            });
            mine.close();
            let raced = a.region().steps() - start > k;
            if !raced {
                if other_closes {
                    b.drop_ref(cid.slot, bn);
                } else {
                    b.retire(cid, bn).unwrap();
                }
            }
            assert_eq!(b.free_pages(), all, "interleaved before step {k}");
            assert_eq!(b.slot_state(cid.slot).unwrap().state, State::Free);
            audit(&b);
            if !raced {
                break;
            }
        }
    }
}
