//! The `prefork1` program: Fjord's prefork web server on port 8000 with 1 forked worker(s)
//! (`fjord_prefork::server`).
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
fn main() -> u8 {
    fjord_prefork::server::serve(1)
}

#[cfg(target_os = "none")]
fjord_libos::program!(
    main,
    name = "prefork1",
    stack_size = "64K",
    heap_size = "4M"
);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("prefork1 is a Fjord program: run it in Fjord (POST /processes/prefork1)");
}
