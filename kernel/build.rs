//! Links the kernel binary with `linker.ld` when it is built for the bare-metal target.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed={dir}/linker.ld");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-arg-bins=-T{dir}/linker.ld");
        println!("cargo:rustc-link-arg-bins=--no-pie");
        println!("cargo:rustc-link-arg-bins=-zmax-page-size=4096");
    }
}
