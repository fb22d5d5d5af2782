//! The `redisbench` program: the cost of the `redis` program's `BGSAVE`, in guest instructions
//! (the TSC under `-icount`), for the `fork` benchmark group.
//!
//! For a keyspace of 10,000 keys, of 100,000 keys (keys `key:<n>`, 3-byte values as
//! `redis-benchmark` writes them) and of 100 MB (25,600 values of 4 KiB), it runs what `BGSAVE`
//! runs: `fork` (copy-on-pointer-access, the program's default), the child writing the
//! keyspace in RDB version 10 through `fjord_redis`'s writer (giving each value of a page or
//! more back once written) and exiting, the parent's
//! `waitpid`. The child's file goes to a sink that only counts its bytes (the disk is not what
//! is measured). Two records per size: `redis_bgsave_fork_<size>`, the instructions of the
//! `fork` call in the parent (what `latest_fork_usec` measures), and
//! `redis_bgsave_<size>`, from before the `fork` until `waitpid` returned: the snapshot
//! finished (`_iso_full` at isolation full). Exit code 0 when every save succeeded.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod program {
    use alloc::vec::Vec;
    use core::fmt::Write;
    use fjord_libos::function::StackText;
    use fjord_libos::process::{self, ExitStatus};
    use fjord_redis::Db;
    use fjord_redis::rdb::{self, AuxInfo};

    /// Saves per size.
    const RUNS: usize = 5;

    /// The time-stamp counter: guest instructions under `-icount`.
    fn rdtsc() -> u64 {
        let (lo, hi): (u32, u32);
        // SAFETY: RDTSC only reads the time-stamp counter into two registers.
        unsafe { core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack)) };
        (u64::from(hi) << 32) | u64::from(lo)
    }

    /// One `BENCH` record of `samples` (sorted here).
    fn report(metric: &str, samples: &mut [u64]) {
        samples.sort_unstable();
        let mut line = StackText::<256>::new();
        let _ = write!(
            line,
            "BENCH {{\"group\":\"fork\",\"metric\":\"{metric}\",\"system\":\"fjord\",\"unit\":\"insns\",\"median\":{},\"min\":{},\"max\":{},\"runs\":{}}}",
            samples[samples.len() / 2],
            samples[0],
            samples[samples.len() - 1],
            samples.len()
        );
        process::print(line.as_str());
    }

    /// A background save of `db`: the instructions of `fork`, and of the whole save.
    fn bgsave(db: &mut Db) -> Option<(u64, u64)> {
        let aux = AuxInfo {
            ctime: 0,
            used_mem: 0,
        };
        let t0 = rdtsc();
        let pid = process::fork().ok()?;
        if pid == 0 {
            let mut bytes = 0u64;
            // As the `redis` program's child: values of a page or more given back once
            // written.
            let written = rdb::write_snapshot_dismissing(
                db,
                &aux,
                |chunk: &[u8]| {
                    bytes += chunk.len() as u64;
                    Ok::<(), ()>(())
                },
                |values| {
                    let _ = process::discard_all(values);
                },
                || {},
            );
            process::exit(if written.is_ok() && bytes > 0 { 0 } else { 1 });
        }
        let forked = rdtsc() - t0;
        match process::waitpid(pid, 0) {
            Ok(Some((_, ExitStatus::Exited(0)))) => Some((forked, rdtsc() - t0)),
            _ => None,
        }
    }

    /// The metric names' suffix for this μprocess's isolation level (none when it is off), as
    /// the group's other programs name theirs.
    fn level_suffix() -> &'static str {
        use fjord_libos::process::{Isolation, isolation};
        match isolation() {
            Isolation::None => "",
            Isolation::NonAdversarial => "_iso_nonadv",
            Isolation::Full => "_iso_full",
        }
    }

    fn key(n: usize) -> Vec<u8> {
        let mut k = StackText::<32>::new();
        let _ = write!(k, "key:{n:012}");
        k.as_str().as_bytes().to_vec()
    }

    pub fn main() -> u8 {
        let sizes: [(&str, usize, usize); 3] = [
            ("10k", 10_000, 3),
            ("100k", 100_000, 3),
            ("100mb", 25_600, 4096),
        ];
        let mut db = Db::new();
        for (name, keys, value_len) in sizes {
            db = Db::new();
            for n in 0..keys {
                db.insert_loaded(key(n), alloc::vec![b'x'; value_len], None);
            }
            let mut fork = [0u64; RUNS];
            let mut save = [0u64; RUNS];
            for i in 0..RUNS {
                let Some((f, s)) = bgsave(&mut db) else {
                    process::print("redisbench: a background save failed");
                    return 1;
                };
                fork[i] = f;
                save[i] = s;
            }
            let mut metric = StackText::<64>::new();
            let _ = write!(metric, "redis_bgsave_fork_{name}{}", level_suffix());
            report(metric.as_str(), &mut fork);
            let mut metric = StackText::<64>::new();
            let _ = write!(metric, "redis_bgsave_{name}{}", level_suffix());
            report(metric.as_str(), &mut save);
        }
        drop(db);
        0
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "redisbench",
    stack_size = "64K",
    heap_size = "256M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("redisbench is a Fjord program: `cargo xtask bench fork` runs it");
}
