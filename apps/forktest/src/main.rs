//! The `forktest` program: the μFork walk-through a test can check by its exit code.
//!
//! It builds a linked list on its heap, then forks three children. Each child walks the list
//! through the pointers it inherited (relocated into its own area by the kernel), changes every
//! node, checks its PID and parent, and exits with `10 + i`. The parent waits for each child,
//! checks the status, and checks that its own list is untouched. Exit code 0 means every check
//! passed; any other code names the first that failed. Then it checks pipes (a child writes
//! through one, the parent reads to end of file), descriptors inherited across `fork`, `kill`
//! of a sleeping child, and `write` to the console.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

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
        let _ = process::write(1, b"forktest: pipes, kill and the console work\n");
        process::print("forktest: every child saw its own relocated copy");
        0
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
fjord_libos::program!(
    program::main,
    name = "forktest",
    stack_size = "64K",
    heap_size = "256K"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("forktest is a Fjord program: run it with `cargo xtask run`");
}
