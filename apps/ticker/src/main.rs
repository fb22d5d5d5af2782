//! The `ticker` program: builds pointer-rich state on its heap (a linked list of boxed nodes
//! with strings, a `BTreeMap` of vectors, thousands of small integers in 8-byte slots, boxed
//! closures), then every 100 ms changes a little of it, walks all of it and prints
//! `ticker: μprocess P tick T sum S`, where the sum is a hash of everything it holds. The
//! changes depend only on the tick, so the sum of tick T is the same in every run: a clone
//! restored from a checkpoint (on any node, at any address) must print, for each tick, the sum
//! the original prints for it. Every 25 ticks it forks a child that hashes what it inherited
//! and exits with 0 if the hash is its parent's (`ticker: μprocess P tick T child C ended
//! Some(Exited(0))`). It exits with 0 after 1200 ticks.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod program {
    use alloc::boxed::Box;
    use alloc::collections::BTreeMap;
    use alloc::string::String;
    use alloc::vec::Vec;
    use fjord_libos::process;

    const NODES: u64 = 400;
    const KEYS: u32 = 200;
    const SMALL: usize = 4096;
    const TICKS: u64 = 1200;
    /// Every this many ticks it forks a child that checks what it inherited.
    const FORK_EVERY: u64 = 25;

    struct Node {
        value: u64,
        label: String,
        next: Option<Box<Node>>,
    }

    struct State {
        list: Option<Box<Node>>,
        map: BTreeMap<u32, Vec<u16>>,
        small: Vec<u64>,
        ops: Vec<Box<dyn Fn(u64) -> u64>>,
    }

    /// FNV-1a over 8-byte words.
    fn mix(h: u64, v: u64) -> u64 {
        let mut h = h;
        for b in v.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        h
    }

    impl State {
        fn new() -> State {
            let mut list = None;
            for i in (0..NODES).rev() {
                let mut label = String::new();
                let _ = core::fmt::Write::write_fmt(&mut label, format_args!("node-{i}"));
                list = Some(Box::new(Node {
                    value: i,
                    label,
                    next: list,
                }));
            }
            let map = (0..KEYS)
                .map(|k| (k, (0..(k % 7) as u16 + 1).collect()))
                .collect();
            // Small integers, as programs hold them: counters, descriptors, lengths.
            let small = (0..SMALL as u64).map(|i| i % 97).collect();
            let ops: Vec<Box<dyn Fn(u64) -> u64>> = (0..16u64)
                .map(|k| {
                    let table: Vec<u64> = (0..k + 1).collect();
                    Box::new(move |x: u64| x.wrapping_mul(k + 3) ^ table[(x % (k + 1)) as usize])
                        as Box<dyn Fn(u64) -> u64>
                })
                .collect();
            State {
                list,
                map,
                small,
                ops,
            }
        }

        /// Changes what tick `t` changes.
        fn change(&mut self, t: u64) {
            let mut node = self.list.as_deref_mut();
            let mut i = 0;
            while let Some(n) = node {
                if i == t % NODES {
                    n.value = n.value.wrapping_add(t);
                    n.label.push(char::from(b'a' + (t % 26) as u8));
                    break;
                }
                i += 1;
                node = n.next.as_deref_mut();
            }
            if let Some(v) = self.map.get_mut(&((t % u64::from(KEYS)) as u32)) {
                v.push(t as u16);
            }
            self.small[(t as usize * 31) % SMALL] = t % 1000;
        }

        /// A hash of everything it holds (walking every pointer), with the closures applied
        /// to `t`; `None` if the list is not as long as built.
        fn sum(&self, t: u64) -> Option<u64> {
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            let mut node = self.list.as_deref();
            let mut count = 0;
            while let Some(n) = node {
                h = mix(h, n.value);
                for b in n.label.bytes() {
                    h = mix(h, u64::from(b));
                }
                count += 1;
                node = n.next.as_deref();
            }
            if count != NODES {
                return None;
            }
            for (k, v) in &self.map {
                h = mix(h, u64::from(*k));
                for x in v {
                    h = mix(h, u64::from(*x));
                }
            }
            for &s in &self.small {
                h = mix(h, s);
            }
            for f in &self.ops {
                h = mix(h, f(t));
            }
            Some(h)
        }
    }

    /// Forks a child that hashes the state it inherited and exits 0 when the hash is the
    /// parent's `sum`; says how the child ended.
    fn fork_check(pid: u64, t: u64, state: &State, sum: u64) {
        match process::fork() {
            Ok(0) => process::exit(u8::from(state.sum(t) != Some(sum))),
            Ok(child) => {
                let status = process::waitpid(child, 0).ok().flatten().map(|(_, s)| s);
                say(format_args!(
                    "ticker: μprocess {pid} tick {t} child {child} ended {status:?}"
                ));
            }
            Err(e) => say(format_args!(
                "ticker: μprocess {pid} tick {t} fork failed {e:?}"
            )),
        }
    }

    fn say(args: core::fmt::Arguments<'_>) {
        let mut line = fjord_libos::function::StackText::<96>::new();
        let _ = core::fmt::Write::write_fmt(&mut line, args);
        process::print(line.as_str());
    }

    pub fn main() -> u8 {
        let mut state = State::new();
        for t in 1..=TICKS {
            process::sleep(100_000_000);
            state.change(t);
            // After a restore the clone has a PID of its own node.
            let pid = process::getpid();
            let Some(s) = state.sum(t) else {
                say(format_args!("ticker: μprocess {pid} tick {t}: list broken"));
                return 1;
            };
            say(format_args!("ticker: μprocess {pid} tick {t} sum {s:016x}"));
            if t % FORK_EVERY == 0 {
                fork_check(pid, t, &state, s);
            }
        }
        0
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "ticker",
    stack_size = "32K",
    heap_size = "512K",
    log_limit = "256K"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("ticker is a Fjord program: start it with POST /processes/ticker");
}
