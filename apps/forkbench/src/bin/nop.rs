//! The `nop` program: exits with 0 at once. The `spawn` benchmark starts it, as Linux's
//! `fork_exec_wait` execs a static hello-world.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
fjord_libos::program!(
    main_nop,
    name = "nop",
    stack_size = "16K",
    heap_size = "16K"
);

#[cfg(target_os = "none")]
fn main_nop() -> u8 {
    0
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("nop is a Fjord program: `cargo xtask bench fork` spawns it");
}
