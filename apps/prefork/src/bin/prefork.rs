//! The `prefork` program: Fjord's prefork web server on port 8000 with 3 forked worker(s)
//! (`fjord_prefork::server`).
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
fn main() -> u8 {
    fjord_prefork::server::serve(3)
}

#[cfg(target_os = "none")]
fjord_libos::program!(main, name = "prefork", stack_size = "64K", heap_size = "4M");

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("prefork is a Fjord program: run it in Fjord (POST /processes/prefork)");
}
