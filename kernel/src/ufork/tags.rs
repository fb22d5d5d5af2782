//! The capability tags `fork` relocates by: one tag source per μprocess, built as the boot
//! option `tags=` chose ([`TagChoice`]), through which the full copy, the lazy copies and the
//! saved registers all read tags; and the words relocated, counted by the source that tagged
//! them (`/metrics`).
//!
//! The sources are emulated (`fjord_ufork::source`): the shadow table the kernel and loader
//! fill (precise), inference from values (inferred), or their union. A CHERI backend would be
//! one more [`TagSource`] built here; the fork code does not name a source.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use fjord_ufork::source::{Emulated, TagChoice, Tally};
use fjord_ufork::tags::ShadowTags;

/// A μprocess's tag source as the kernel holds it: made once per μprocess, shared with the
/// lazy forks that read it.
pub type Source = Arc<Emulated>;

/// The boot choice, as its index in [`TagChoice::ALL`].
static CHOICE: AtomicU8 = AtomicU8::new(2);

/// Words relocated by fork's full copy: precise only, inferred only, both, other.
static RELOCATED: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Registers relocated at fork, by the same split.
static REGISTERS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Sets the source every μprocess forked from now on reads (`tags=` at boot).
pub fn set_choice(choice: TagChoice) {
    let i = TagChoice::ALL
        .iter()
        .position(|&c| c == choice)
        .unwrap_or(2);
    CHOICE.store(i as u8, Ordering::Relaxed);
}

/// The source chosen at boot.
pub fn choice() -> TagChoice {
    TagChoice::ALL[usize::from(CHOICE.load(Ordering::Relaxed)).min(2)]
}

/// The tag source of a μprocess whose shadow table is `tags`.
pub fn source(tags: ShadowTags) -> Source {
    Arc::new(Emulated::new(choice(), tags))
}

/// [`source`], made in `spare`'s allocation when no one else holds it.
pub fn source_in(spare: Option<Source>, tags: ShadowTags) -> Source {
    let Some(mut s) = spare else {
        return source(tags);
    };
    match Arc::get_mut(&mut s) {
        Some(e) => {
            *e = Emulated::new(choice(), tags);
            s
        }
        None => source(tags),
    }
}

fn add(counters: &[AtomicU64; 4], t: &Tally) {
    for (c, n) in counters
        .iter()
        .zip([t.precise, t.inferred, t.both, t.other])
    {
        if n != 0 {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }
}

fn read(counters: &[AtomicU64; 4]) -> Tally {
    let [precise, inferred, both, other] =
        core::array::from_fn(|i| counters[i].load(Ordering::Relaxed));
    Tally {
        precise,
        inferred,
        both,
        other,
    }
}

/// Counts words a full copy relocated.
pub fn count_words(t: &Tally) {
    add(&RELOCATED, t);
}

/// Counts registers a fork relocated.
pub fn count_registers(t: &Tally) {
    add(&REGISTERS, t);
}

/// Words relocated by full copies since boot (the lazy copies count theirs in
/// [`super::lazy::LazyStats`]).
pub fn words_relocated() -> Tally {
    read(&RELOCATED)
}

/// Registers relocated at fork since boot.
pub fn registers_relocated() -> Tally {
    read(&REGISTERS)
}
