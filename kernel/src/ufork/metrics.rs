//! μFork's families in `/metrics`: μprocesses, the pages of lazy forks, and the words and
//! registers `fork` relocated by the tag source that tagged them.

use alloc::vec::Vec;
use fjord_faas::gateway::Sample;
use fjord_faas::gateway::SampleKind::{Counter, Gauge};

/// Appends this subsystem's samples to `out`.
pub fn samples(out: &mut Vec<Sample>) {
    let lazy = super::lazy::stats();
    out.push(Sample::new(
        "fjord_uprocesses",
        Gauge,
        "Live and zombie μprocesses.",
        &[],
        super::count() as u64,
    ));
    out.extend(Sample::family(
        "fjord_ufork_pages_total",
        Counter,
        "Pages of lazy forks: left pending at fork, copied for a child, shared read-only; of the copies, those a parent's write made unrelocated (relocated on the child's first access) and those whose frame the child kept when its parent wrote them (the parent took the copy); pages a child discarded while still waiting for them.",
        &[
            (&[("event", "deferred")], lazy.pages_deferred),
            (&[("event", "copied")], lazy.pages_copied),
            (&[("event", "shared")], lazy.pages_shared),
            (&[("event", "staged")], lazy.pages_staged),
            (&[("event", "kept_by_child")], lazy.frames_given),
            (&[("event", "discarded_pending")], lazy.pages_discarded),
        ],
    ));
    out.push(Sample::new(
        "fjord_uprocess_pages_discarded_total",
        Counter,
        "Frames μprocesses gave back with discard (madvise MADV_DONTNEED).",
        &[],
        super::pages_discarded(),
    ));
    out.push(Sample::new(
        "fjord_uprocess_pds_reused_total",
        Counter,
        "μprocesses that started in the PD and emptied area of an ended μprocess of their program instead of a new one.",
        &[],
        super::pds_reused(),
    ));
    out.push(Sample::new(
        "fjord_uprocess_waits_handed_off_total",
        Counter,
        "waitpid calls for a child whose step was next on the caller's executor, which ran it before the caller blocked.",
        &[],
        super::handoffs(),
    ));
    out.push(Sample::new(
        "fjord_ufork_request_instances_forked_total",
        Counter,
        "Request instances of fork-per-request functions (groundhog=fork) forked from their zygotes.",
        &[],
        super::forked_instances(),
    ));
    out.push(Sample::new(
        "fjord_ufork_request_instances_reused_total",
        Counter,
        "Request instances of fork-per-request functions forked into the PD and emptied area of an ended request's instance instead of a new one.",
        &[],
        super::request_pds_reused(),
    ));
    out.push(Sample::new(
        "fjord_ufork_syscall_bytes_copied_total",
        Counter,
        "Bytes of system-call buffers (read, write, pipe) μprocesses at isolation full had copied through kernel buffers.",
        &[],
        super::files::bytes_copied(),
    ));
    out.push(Sample::new(
        "fjord_ufork_writes_in_call_total",
        Counter,
        "μprocess writes to pipes and sockets with room completed inside the system call, without ending the run in ring 3.",
        &[],
        super::in_call::writes(),
    ));
    let mut words = super::tags::words_relocated();
    words.add(&lazy.relocated);
    let regs = super::tags::registers_relocated();
    for (name, help, t) in [
        (
            "fjord_ufork_words_relocated_total",
            "Words of forked memory relocated (full and lazy copies), by the tag source that tagged them: the shadow table only, inference only, both.",
            words,
        ),
        (
            "fjord_ufork_registers_relocated_total",
            "Saved registers relocated at fork, by the source that tagged them: known to the kernel (instruction, stack, thread pointer; the frame pointer under precise tags) or inferred from their values.",
            regs,
        ),
    ] {
        out.extend(Sample::family(
            name,
            Counter,
            help,
            &[
                (&[("source", "precise")], t.precise),
                (&[("source", "inferred")], t.inferred),
                (&[("source", "both")], t.both),
                (&[("source", "other")], t.other),
            ],
        ));
    }
}
