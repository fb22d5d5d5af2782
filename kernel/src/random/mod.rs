//! The kernel's random numbers: one ChaCha20 generator (`rand_chacha`), seeded once at boot,
//! behind a lock; `getrandom(2)` and the network stack's seed draw from it.
//!
//! The seed is 256 bits from the CPU's RDSEED, else RDRAND ([`cpu::hardware_random`]), mixed
//! with the time-stamp counter and the real-time clock. A CPU with neither instruction (QEMU's
//! TCG models without `rdrand`) leaves only the clocks: the numbers then differ from boot to
//! boot but someone who knows the boot's timing could guess them, and the boot log says so.
//! Linux's `getrandom` additionally mixes interrupt timings into its pool and reseeds; this
//! generator does not.

use crate::arch::cpu::{self, HwRandom};
use fjord_libos::abi::GETRANDOM_MAX;
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use spin::Mutex;

/// Where the generator's seed came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedSource {
    /// The CPU's random-number instructions (and the clocks).
    Hardware(HwRandom),
    /// The time-stamp counter and the real-time clock alone.
    Clocks,
}

static GENERATOR: Mutex<Option<(ChaCha20Rng, SeedSource)>> = Mutex::new(None);

/// A seed: four hardware words where the CPU gives them, each mixed with a TSC reading and the
/// boot's real-time clock.
fn seed() -> ([u8; 32], SeedSource) {
    let mut seed = [0u8; 32];
    let mut source = SeedSource::Clocks;
    let wall = crate::arch::time::boot_unix_ns();
    for (i, word) in seed.chunks_exact_mut(8).enumerate() {
        let hw = match cpu::hardware_random() {
            Some((v, s)) => {
                source = SeedSource::Hardware(s);
                v
            }
            None => 0,
        };
        let tsc = cpu::rdtsc().rotate_left(17 * i as u32);
        word.copy_from_slice(&(hw ^ tsc ^ wall.rotate_left(29 + 8 * i as u32)).to_le_bytes());
    }
    (seed, source)
}

/// Runs `f` on the generator and where its seed came from, seeding it first if this is the
/// first use.
fn with<R>(f: impl FnOnce(&mut ChaCha20Rng, SeedSource) -> R) -> R {
    let mut g = GENERATOR.lock();
    let (rng, source) = g.get_or_insert_with(|| {
        let (s, source) = seed();
        (ChaCha20Rng::from_seed(s), source)
    });
    f(rng, *source)
}

/// Seeds the generator (if nothing did yet) and says where the seed came from.
pub fn init() -> SeedSource {
    with(|_, source| source)
}

/// Fills `buf` with random bytes.
pub fn fill(buf: &mut [u8]) {
    with(|rng, _| rng.fill_bytes(buf));
}

/// `getrandom(buf, len)`'s work for a caller whose memory `put(offset, bytes)` writes: up
/// to [`GETRANDOM_MAX`] random bytes, a chunk at a time; how many it wrote, or `put`'s error.
pub fn fill_user<E>(len: u64, mut put: impl FnMut(u64, &[u8]) -> Result<(), E>) -> Result<u64, E> {
    let n = len.min(GETRANDOM_MAX);
    let mut chunk = [0u8; 256];
    let mut done = 0;
    while done < n {
        let part = &mut chunk[..(n - done).min(256) as usize];
        fill(part);
        put(done, part)?;
        done += part.len() as u64;
    }
    Ok(n)
}

/// A random 64-bit number.
pub fn u64() -> u64 {
    with(|rng, _| rng.next_u64())
}
