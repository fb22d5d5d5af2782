//! The `forktest` program: the μFork walk-through a test can check by its exit code.
//!
//! It builds a linked list on its heap, then forks three children. Each child walks the list
//! through the pointers it inherited (relocated into its own area by the kernel), changes every
//! node, checks its PID and parent, and exits with `10 + i`. The parent waits for each child,
//! checks the status, and checks that its own list is untouched. Exit code 0 means every check
//! passed; any other code names the first that failed. Then it checks pipes (a child writes
//! through one, the parent reads to end of file), descriptors inherited across `fork`, `kill`
//! of a sleeping child, a parent's writes after `fork` that its child must not see, and `write`
//! to the console; heap structures (`Vec<String>`, `BTreeMap`,
//! `Box<dyn Trait>`) and function pointers across `fork`, a grandchild, 100 children, a child
//! that faults on its parent's memory, and a fork bomb that hits its program's bound; writable
//! statics and tables of function pointers, its own copy in each child, with the child's code
//! at its own address, and a child that writes its code killed; `discard`, alone and in a
//! forked child that gives its parent's pages back; `getrandom`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod discard;

#[cfg(target_os = "none")]
mod random;

#[cfg(target_os = "none")]
mod sleepers;

#[cfg(target_os = "none")]
mod signals;

#[cfg(target_os = "none")]
mod stale;

#[cfg(target_os = "none")]
mod statics;

#[cfg(target_os = "none")]
mod program {
    use alloc::boxed::Box;
    use fjord_libos::process::{self, ExitStatus};

    /// A heap-allocated list node: pointers into the area that `fork` must relocate.
    struct Node {
        value: u64,
        next: Option<Box<Node>>,
    }

    fn list(n: u64) -> Option<Box<Node>> {
        (0..n).fold(None, |next, value| Some(Box::new(Node { value, next })))
    }

    fn sum(mut at: &Option<Box<Node>>) -> u64 {
        let mut s = 0;
        while let Some(node) = at {
            s += node.value;
            at = &node.next;
        }
        s
    }

    fn bump(mut at: &mut Option<Box<Node>>, by: u64) {
        while let Some(node) = at {
            node.value += by;
            at = &mut node.next;
        }
    }

    pub fn main() -> u8 {
        let mut head = list(100);
        let expected = sum(&head);
        let me = process::getpid();
        let mut children = [0u64; 3];
        for (i, slot) in children.iter_mut().enumerate() {
            match process::fork() {
                Ok(0) => {
                    // The child: its own copy of the list, at its own address.
                    if process::getppid() != me || process::getpid() == me {
                        process::exit(2);
                    }
                    if sum(&head) != expected {
                        process::exit(3);
                    }
                    bump(&mut head, 1000);
                    if sum(&head) != expected + 100 * 1000 {
                        process::exit(4);
                    }
                    process::exit(10 + i as u8);
                }
                Ok(pid) => *slot = pid,
                Err(_) => return 5,
            }
        }
        for (i, &pid) in children.iter().enumerate() {
            match process::waitpid(pid, 0) {
                Ok(Some((p, ExitStatus::Exited(code)))) if p == pid && code == 10 + i as u8 => {}
                Ok(Some((_, ExitStatus::Exited(code)))) => return 20 + code,
                _ => return 6,
            }
        }
        // No child is left.
        if process::waitpid(process::ANY_CHILD, 0).is_ok() {
            return 7;
        }
        if sum(&head) != expected {
            return 8;
        }
        if let Err(code) = pipes_and_kill() {
            return code;
        }
        if let Err(code) = later_writes_stay_apart() {
            return code;
        }
        if let Err(code) = shared_pages_stay_apart() {
            return code;
        }
        if let Err(code) = crate::more::structures_and_families() {
            return code;
        }
        if let Err(code) = crate::statics::statics_and_code_in_the_area() {
            return code;
        }
        if let Err(code) = crate::statics::ended_siblings_leave_nothing_behind() {
            return code;
        }
        if let Err(code) = crate::stale::integers_over_stale_pointers() {
            return code;
        }
        if let Err(code) = crate::signals::faults_and_memory() {
            return code;
        }
        if let Err(code) = crate::discard::discarded_pages() {
            return code;
        }
        if let Err(code) = crate::random::random_bytes() {
            return code;
        }
        let _ = process::write(1, b"forktest: pipes, kill and the console work\n");
        process::print("forktest: every child saw its own relocated copy");
        0
    }

    /// After `fork`, the parent changes its list before the child looks (the child waits on a
    /// pipe): the child sees the list as of the fork, and its own changes stay its own.
    fn later_writes_stay_apart() -> Result<(), u8> {
        let mut head = list(300);
        let expected = sum(&head);
        let (r, w) = process::pipe().map_err(|_| 30)?;
        match process::fork() {
            Ok(0) => {
                let mut b = [0u8; 1];
                if process::read(r, &mut b) != Ok(1) {
                    process::exit(31);
                }
                if sum(&head) != expected {
                    process::exit(32);
                }
                bump(&mut head, 7);
                process::exit(if sum(&head) == expected + 300 * 7 {
                    0
                } else {
                    33
                });
            }
            Ok(child) => {
                bump(&mut head, 1);
                process::write(w, b"x").map_err(|_| 34)?;
                match process::waitpid(child, 0) {
                    Ok(Some((_, ExitStatus::Exited(0)))) => {}
                    Ok(Some((_, ExitStatus::Exited(code)))) => return Err(code),
                    _ => return Err(35),
                }
                let _ = (process::close(r), process::close(w));
                if sum(&head) != expected + 300 {
                    return Err(36);
                }
                Ok(())
            }
            Err(_) => Err(37),
        }
    }

    /// Pages without pointers: the child reads them (copy-on-pointer-access maps the parent's
    /// frames read-only), then the parent changes them; the child reads them again and must
    /// still see the values of the fork. The child then writes its pages (which kept the
    /// frames the parent wrote away from): the parent must not see that.
    fn shared_pages_stay_apart() -> Result<(), u8> {
        let mut plain: alloc::vec::Vec<u64> = (0..8192u64).collect();
        let expected: u64 = plain.iter().sum();
        let (from_parent, to_child) = process::pipe().map_err(|_| 50)?;
        let (from_child, to_parent) = process::pipe().map_err(|_| 51)?;
        match process::fork() {
            Ok(0) => {
                let first: u64 = plain.iter().sum();
                let mut b = [0u8; 1];
                if process::write(to_parent, b"a") != Ok(1)
                    || process::read(from_parent, &mut b) != Ok(1)
                {
                    process::exit(52);
                }
                let again: u64 = plain.iter().sum();
                for x in plain.iter_mut() {
                    *x = x.wrapping_mul(3);
                }
                process::exit(if first == expected && again == expected {
                    0
                } else {
                    53
                });
            }
            Ok(child) => {
                let mut b = [0u8; 1];
                process::read(from_child, &mut b).map_err(|_| 54)?;
                for x in plain.iter_mut() {
                    *x += 1;
                }
                process::write(to_child, b"b").map_err(|_| 55)?;
                match process::waitpid(child, 0) {
                    Ok(Some((_, ExitStatus::Exited(0)))) => {}
                    Ok(Some((_, ExitStatus::Exited(code)))) => return Err(code),
                    _ => return Err(56),
                }
                for fd in [from_parent, to_child, from_child, to_parent] {
                    let _ = process::close(fd);
                }
                if plain.iter().sum::<u64>() != expected + 8192 {
                    return Err(57);
                }
                Ok(())
            }
            Err(_) => Err(58),
        }
    }

    /// A child writes through a pipe it inherited; a sleeping child is killed.
    fn pipes_and_kill() -> Result<(), u8> {
        let (r, w) = process::pipe().map_err(|_| 40)?;
        match process::fork() {
            Ok(0) => {
                let _ = process::close(r);
                let msg = b"through the pipe";
                let ok = process::write(w, msg) == Ok(msg.len());
                process::exit(if ok { 0 } else { 1 });
            }
            Ok(child) => {
                process::close(w).map_err(|_| 41)?;
                let mut got = [0u8; 64];
                let mut n = 0;
                loop {
                    match process::read(r, &mut got[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(_) => return Err(42),
                    }
                }
                if &got[..n] != b"through the pipe" {
                    return Err(43);
                }
                match process::waitpid(child, 0) {
                    Ok(Some((_, ExitStatus::Exited(0)))) => {}
                    _ => return Err(44),
                }
                process::close(r).map_err(|_| 45)?;
            }
            Err(_) => return Err(46),
        }
        match process::fork() {
            Ok(0) => {
                process::sleep(10_000_000_000);
                process::exit(1);
            }
            Ok(sleeper) => {
                process::kill(sleeper, 9).map_err(|_| 47)?;
                match process::waitpid(sleeper, 0) {
                    Ok(Some((_, ExitStatus::Killed(9)))) => Ok(()),
                    _ => Err(48),
                }
            }
            Err(_) => Err(49),
        }
    }
}

#[cfg(target_os = "none")]
mod more {
    use alloc::boxed::Box;
    use alloc::collections::BTreeMap;
    use alloc::string::{String, ToString};
    use alloc::vec::Vec;
    use fjord_libos::process::{self, ANY_CHILD, ExitStatus};

    trait Shape {
        fn area(&self) -> u64;
    }
    struct Square(u64);
    impl Shape for Square {
        fn area(&self) -> u64 {
            self.0 * self.0
        }
    }

    fn triple(x: u64) -> u64 {
        3 * x
    }

    /// Heap structures and pointers to code built before a fork work in the child; a
    /// grandchild; 100 children; a child that faults; a fork bomb that hits the limit.
    pub fn structures_and_families() -> Result<(), u8> {
        let names: Vec<String> = (0..20).map(|i| i.to_string()).collect();
        let map: BTreeMap<u64, String> = (0..50).map(|i| (i, i.to_string())).collect();
        let shape: Box<dyn Shape> = Box::new(Square(7));
        let f: fn(u64) -> u64 = triple;
        match process::fork() {
            Ok(0) => {
                let ok = names.iter().map(|n| n.len()).sum::<usize>() == 30
                    && map.get(&42).map(String::as_str) == Some("42")
                    && shape.area() == 49
                    && f(14) == 42;
                // A grandchild, waited for by the child.
                let code = match process::fork() {
                    Ok(0) => process::exit(5),
                    Ok(g) => match process::waitpid(g, 0) {
                        Ok(Some((_, ExitStatus::Exited(5)))) => 55,
                        _ => 1,
                    },
                    Err(_) => 2,
                };
                process::exit(if ok { code } else { 3 });
            }
            Ok(c) => match process::waitpid(c, 0) {
                Ok(Some((_, ExitStatus::Exited(55)))) => {}
                Ok(Some((_, ExitStatus::Exited(code)))) => return Err(60 + code),
                _ => return Err(61),
            },
            Err(_) => return Err(62),
        }
        // 100 children, waited for in any order.
        let mut sum = 0u64;
        for i in 0..100u64 {
            match process::fork() {
                Ok(0) => process::exit((i % 200) as u8),
                Ok(_) => {}
                Err(_) => return Err(63),
            }
        }
        for _ in 0..100 {
            match process::waitpid(ANY_CHILD, 0) {
                Ok(Some((_, ExitStatus::Exited(code)))) => sum += u64::from(code),
                _ => return Err(64),
            }
        }
        if sum != (0..100).sum::<u64>() {
            return Err(65);
        }
        // A child that follows a pointer into its parent's area (hidden from relocation by an
        // encoding) faults, and its parent learns it.
        let secret = Box::new(0x5eed_u64);
        // `black_box` keeps the encoding: the compiler must not cancel the two XORs.
        let hidden = core::hint::black_box((&*secret as *const u64 as u64) ^ 0x5555_0000_0000_0000);
        match process::fork() {
            Ok(0) => {
                let p = (core::hint::black_box(hidden) ^ 0x5555_0000_0000_0000) as *const u64;
                // SAFETY: none intended: the address is the parent's, which this μprocess's
                // protection domain does not map; the read must fault.
                let v = unsafe { p.read_volatile() };
                process::exit(if v == 0x5eed { 70 } else { 71 });
            }
            Ok(c) => match process::waitpid(c, 0) {
                Ok(Some((_, ExitStatus::Killed(11)))) => {}
                Ok(Some((_, ExitStatus::Exited(70)))) => return Err(73),
                Ok(Some((_, ExitStatus::Exited(_)))) => return Err(74),
                Ok(Some((_, ExitStatus::Killed(_)))) => return Err(75),
                Ok(None) => return Err(76),
                Err(_) => return Err(66),
            },
            Err(_) => return Err(67),
        }
        // A fork bomb: children that sleep until the program's bound (`max_processes`) is
        // reached; fork then fails.
        let Some((kids, refused)) = crate::sleepers::fork_until_refused(1000) else {
            return Err(68);
        };
        if refused.is_none() || kids.is_empty() {
            return Err(69);
        }
        crate::sleepers::kill_and_reap(&kids).map_err(|_| 72)?;
        Ok(())
    }
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    program::main,
    name = "forktest",
    stack_size = "64K",
    heap_size = "256K",
    max_processes = "160"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("forktest is a Fjord program: run it with `cargo xtask run`");
}
