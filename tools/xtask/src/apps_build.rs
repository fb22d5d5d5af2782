//! Building the function modules in `apps/` as static-PIE ELF files and checking each with the
//! loader's own validator.
//!
//! The apps are built for `x86_64-unknown-none` with `-C relocation-model=pie` (the kernel's
//! `.cargo/config.toml` flags ask for a fixed-address link; `RUSTFLAGS` takes precedence over
//! them) and debug information stripped, in their own target directory `<target>/apps` so the
//! kernel's and the apps' differing flags never invalidate each other's build cache.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use fjord_faas::module::{
    LoadPlan, ModuleKind, ModuleLimits, ProgramImage, check_shareable, validate,
};

use crate::kernel_build::KERNEL_TARGET;
use crate::workspace;

/// The function apps: (cargo package, binary and function name).
pub const APPS: &[(&str, &str)] = &[
    ("fjord-app-echo", "echo"),
    ("fjord-app-hello", "hello"),
    ("fjord-app-forktest", "forktest"),
    ("fjord-app-forktest", "forkoom"),
    ("fjord-app-forktest", "forkbomb"),
    ("fjord-app-forktest", "tlstest"),
    ("fjord-app-forktest", "forkbig"),
    ("fjord-app-forktest", "forkframes"),
    ("fjord-app-forktest", "filetest"),
    ("fjord-app-forktest", "filesaver"),
    ("fjord-app-redis", "redis"),
    ("fjord-app-redis", "redisbench"),
    ("fjord-app-tcp", "tcpecho"),
    ("fjord-app-prefork", "prefork"),
    ("fjord-app-prefork", "prefork1"),
    ("fjord-app-prefork", "prefork2"),
    ("fjord-app-forkbench", "forkbench"),
    ("fjord-app-forkbench", "forkhello"),
    ("fjord-app-forkbench", "nop"),
    ("fjord-app-sleeper", "sleeper"),
    ("fjord-app-ticker", "ticker"),
    ("fjord-app-ticker", "hoard"),
    ("fjord-app-index", "index"),
    ("fjord-app-hostile", "hostile"),
    ("fjord-app-leak", "leak"),
    ("fjord-app-leak", "leak-init"),
    ("fjord-app-leak", "dirty"),
    ("fjord-app-wordfreq", "wordfreq"),
    ("fjord-app-chain", "relay"),
    ("fjord-app-chain", "fanout"),
    // DeathStarBench Hotel Reservation (apps/WORKLOADS.md).
    ("fjord-app-hotel", "hotel-frontend"),
    ("fjord-app-hotel", "hotel-search"),
    ("fjord-app-hotel", "hotel-geo"),
    ("fjord-app-hotel", "hotel-rate"),
    ("fjord-app-hotel", "hotel-profile"),
    ("fjord-app-hotel", "hotel-user"),
    ("fjord-app-hotel", "hotel-reservation"),
    // DeathStarBench Social Network.
    ("fjord-app-social", "social-frontend"),
    ("fjord-app-social", "social-compose"),
    ("fjord-app-social", "social-text"),
    ("fjord-app-social", "social-unique-id"),
    ("fjord-app-social", "social-user"),
    ("fjord-app-social", "social-graph"),
    ("fjord-app-social", "social-storage"),
    ("fjord-app-social", "social-timeline"),
    // DeathStarBench Media Service.
    ("fjord-app-media", "media-frontend"),
    ("fjord-app-media", "media-unique-id"),
    ("fjord-app-media", "media-compose-review"),
    ("fjord-app-media", "media-page"),
    ("fjord-app-media", "media-movie-info"),
    ("fjord-app-media", "media-cast-info"),
    ("fjord-app-media", "media-plot"),
    ("fjord-app-media", "media-movie-review"),
    ("fjord-app-media", "media-review-storage"),
    // Google Online Boutique ("Hipster").
    ("fjord-app-hipster", "hipster-frontend"),
    ("fjord-app-hipster", "hipster-cart"),
    ("fjord-app-hipster", "hipster-catalog"),
    ("fjord-app-hipster", "hipster-currency"),
    ("fjord-app-hipster", "hipster-shipping"),
    ("fjord-app-hipster", "hipster-payment"),
    ("fjord-app-hipster", "hipster-email"),
    ("fjord-app-hipster", "hipster-checkout"),
];

/// Compiler flags of a function module: position-independent, and with frame pointers (as
/// Fedora and Ubuntu now build their packages), so that μFork's `fork` can tag each frame's
/// saved frame pointer and return address and a profiler can walk the stack.
pub const APP_RUSTFLAGS: &str =
    "-C relocation-model=pie -C strip=debuginfo -C force-frame-pointers=yes";

/// One built and validated function module.
#[derive(Clone, Debug)]
pub struct BuiltApp {
    /// The function's name (also its manifest name).
    pub name: String,
    /// Where the ELF file is.
    pub path: PathBuf,
    /// The ELF file.
    pub bytes: Vec<u8>,
    /// What the validator made of it.
    pub plan: LoadPlan,
}

/// The apps' target directory.
pub fn apps_target_dir() -> PathBuf {
    workspace::target_dir().join("apps")
}

/// The path of the initrd entry for function `name`.
pub fn initrd_path(name: &str) -> String {
    format!("functions/{name}.elf")
}

/// The functions of app `name`: every function of package `fjord-app-<name>` (`hotel` gives all
/// `hotel-*`), or the function called `name`. Empty if there is no such app.
pub fn select(name: &str) -> Vec<&'static str> {
    let package = format!("fjord-app-{name}");
    APPS.iter()
        .filter(|&&(p, f)| p == package || f == name)
        .map(|&(_, f)| f)
        .collect()
}

/// The apps' short names (their packages without `fjord-app-`), in order.
pub fn app_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = Vec::new();
    for (package, _) in APPS {
        let name = package.trim_start_matches("fjord-app-");
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Builds every app in release mode, validates each ELF and checks that its manifest name is the
/// app's name.
pub fn build_apps() -> Result<Vec<BuiltApp>> {
    crate::host_deps::ensure_rust_target(KERNEL_TARGET)?;
    let mut command = workspace::cargo();
    command.args([
        "build",
        "--release",
        "--target",
        KERNEL_TARGET,
        "--target-dir",
    ]);
    command.arg(apps_target_dir());
    let packages: std::collections::BTreeSet<&str> = APPS.iter().map(|&(p, _)| p).collect();
    for package in packages {
        command.args(["--package", package]);
    }
    command.env("RUSTFLAGS", APP_RUSTFLAGS);
    command.env_remove("CARGO_ENCODED_RUSTFLAGS");
    let status = command
        .status()
        .with_context(|| format!("could not run `{}`", workspace::display_command(&command)))?;
    if !status.success() {
        bail!(
            "function module build failed: `{}` ({status})",
            workspace::display_command(&command)
        );
    }
    let dir = apps_target_dir().join(KERNEL_TARGET).join("release");
    APPS.iter()
        .map(|&(_, name)| {
            let path = dir.join(name);
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let plan = check_module(name, &bytes)
                .with_context(|| format!("function module {}", path.display()))?;
            Ok(BuiltApp {
                name: name.to_owned(),
                path,
                bytes,
                plan,
            })
        })
        .collect()
}

/// Validates a module as the kernel will (including, for a function, the no-writable-statics
/// rule of a shared image, and for a program the split of its image for a μprocess area), and
/// checks its manifest names it `name`.
pub fn check_module(name: &str, bytes: &[u8]) -> Result<LoadPlan> {
    let plan = validate(bytes, &ModuleLimits::default())
        .map_err(|e| anyhow::anyhow!("rejected by the module validator: {e}"))?;
    match plan.manifest.kind {
        ModuleKind::Function => {
            check_shareable(&plan).map_err(|e| anyhow::anyhow!("rejected by the loader: {e}"))?
        }
        ModuleKind::Program => {
            ProgramImage::new(&plan, bytes)
                .map_err(|e| anyhow::anyhow!("rejected by the loader: {e:?}"))?;
        }
    }
    if plan.manifest.name.as_str() != name {
        bail!(
            "its manifest names it `{}`, expected `{name}`",
            plan.manifest.name
        );
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_names_are_valid_function_names() {
        for (package, name) in APPS {
            assert!(fjord_faas::FunctionName::new(name).is_ok(), "{name}");
            assert!(package.starts_with("fjord-app-"), "{package}");
            assert_eq!(initrd_path(name), format!("functions/{name}.elf"));
        }
    }

    #[test]
    fn apps_select_their_functions() {
        assert_eq!(select("hello"), ["hello"]);
        assert_eq!(select("relay"), ["relay"]);
        assert_eq!(select("chain"), ["relay", "fanout"]);
        let hotel = select("hotel");
        assert_eq!(hotel.len(), 7);
        assert!(hotel.iter().all(|f| f.starts_with("hotel-")), "{hotel:?}");
        assert!(select("nope").is_empty());
        assert!(select("").is_empty());
        assert_eq!(
            app_names(),
            [
                "echo",
                "hello",
                "forktest",
                "redis",
                "tcp",
                "prefork",
                "forkbench",
                "sleeper",
                "ticker",
                "index",
                "hostile",
                "leak",
                "wordfreq",
                "chain",
                "hotel",
                "social",
                "media",
                "hipster"
            ]
        );
    }

    #[test]
    fn the_fixture_module_passes_the_check_under_its_name() {
        let fixture = workspace::root().join("faas/tests/fixtures/hello-rela.elf");
        let bytes = std::fs::read(fixture).unwrap();
        assert!(check_module("hello", &bytes).is_ok());
        assert!(check_module("echo", &bytes).is_err());
        assert!(check_module("hello", b"not an elf").is_err());
    }
}
