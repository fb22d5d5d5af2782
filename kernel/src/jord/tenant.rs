//! Which function instance each PD acts for: the tenant's key-value namespace and the console
//! budget of the invocation it serves.
//!
//! The executor marks an instance's PD when it hands the instance a request ([`begin`]); a PD
//! the instance creates with `cget` acts for the same instance ([`adopt`], from
//! [`Jord::cget`](super::state::Jord::cget)). A PD no function instance created (the kernel's
//! own test PDs) acts for no tenant: it has no namespace and no console budget. The table is
//! read without the Jord lock: system calls look their caller up with one atomic load.

use super::state::MAX_LIVE_PDS;
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use fjord_pd::PdId;

/// Per PD: its tenant's key-value namespace id (0: none).
static NAMESPACE: [AtomicU32; MAX_LIVE_PDS] = [const { AtomicU32::new(0) }; MAX_LIVE_PDS];
/// Per PD: the instance PD it acts for (itself for an instance; 0: none).
static INSTANCE: [AtomicU16; MAX_LIVE_PDS] = [const { AtomicU16::new(0) }; MAX_LIVE_PDS];
/// Per instance PD: console bytes its current invocation may still write.
static LOG_LEFT: [AtomicU32; MAX_LIVE_PDS] = [const { AtomicU32::new(0) }; MAX_LIVE_PDS];
/// Per PD: whether it is a μprocess (whose memory is its one area: it may not `mmap` or
/// `cget`).
static UPROCESS: [AtomicBool; MAX_LIVE_PDS] = [const { AtomicBool::new(false) }; MAX_LIVE_PDS];

/// `pd`, an instance of a function acting in key-value namespace `namespace`, starts serving a
/// request: it and the PDs it creates may write `log_limit` bytes to the console until the next
/// request.
pub fn begin(pd: PdId, namespace: u32, log_limit: u32) {
    begin_as(pd, namespace, log_limit, false);
}

/// [`begin`] for a μprocess: `pd` is one, and so may not map memory outside its area or
/// create PDs ([`is_uprocess`]).
pub fn begin_uprocess(pd: PdId, namespace: u32, log_limit: u32) {
    begin_as(pd, namespace, log_limit, true);
}

fn begin_as(pd: PdId, namespace: u32, log_limit: u32, uprocess: bool) {
    let i = pd.index();
    if i < MAX_LIVE_PDS {
        NAMESPACE[i].store(namespace, Ordering::Relaxed);
        INSTANCE[i].store(pd.raw(), Ordering::Relaxed);
        LOG_LEFT[i].store(log_limit, Ordering::Relaxed);
        UPROCESS[i].store(uprocess, Ordering::Relaxed);
    }
}

/// Whether `pd` is a μprocess.
pub fn is_uprocess(pd: PdId) -> bool {
    UPROCESS
        .get(pd.index())
        .is_some_and(|u| u.load(Ordering::Relaxed))
}

/// `child` was just created by `parent`: it acts for `parent`'s tenant (for none when the
/// kernel created it).
pub fn adopt(child: PdId, parent: PdId) {
    let (c, p) = (child.index(), parent.index());
    if c >= MAX_LIVE_PDS || p >= MAX_LIVE_PDS {
        return;
    }
    let (ns, instance) = if parent == PdId::KERNEL {
        (0, 0)
    } else {
        (
            NAMESPACE[p].load(Ordering::Relaxed),
            INSTANCE[p].load(Ordering::Relaxed),
        )
    };
    NAMESPACE[c].store(ns, Ordering::Relaxed);
    INSTANCE[c].store(instance, Ordering::Relaxed);
    UPROCESS[c].store(false, Ordering::Relaxed);
}

/// The key-value namespace `pd` acts in, if it acts for a tenant.
pub fn namespace(pd: PdId) -> Option<u32> {
    let ns = NAMESPACE.get(pd.index())?.load(Ordering::Relaxed);
    (ns != 0).then_some(ns)
}

/// Takes `len` bytes from the console budget of the invocation `pd` acts for; false (nothing
/// taken) when the budget does not cover them. The kernel's own PDs, which act for no tenant,
/// have no budget to keep.
pub fn take_log(pd: PdId, len: u32) -> bool {
    let instance = INSTANCE
        .get(pd.index())
        .map_or(0, |i| i.load(Ordering::Relaxed));
    match LOG_LEFT.get(usize::from(instance)) {
        Some(left) if instance != 0 => left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(len))
            .is_ok(),
        _ => true,
    }
}
