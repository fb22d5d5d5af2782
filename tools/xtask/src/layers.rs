//! The kernel's layering check (part of `cargo xtask test`'s lint layer): every kernel folder
//! imports only folders below it in [`ORDER`], and `unsafe` appears only in [`UNSAFE_FOLDERS`].
//!
//! The check reads `kernel/src/<folder>/**.rs` as text: a use of `crate::<name>` (in a path or
//! a `use crate::{…}` group) is an import of the folder that defines `<name>`: the folder of
//! that name, or for an item the crate root re-exports or a macro, the folder it comes from.
//! Comments are skipped. The host-testable modules (`fjord_kernel::…`) are pure logic with no
//! kernel state and may be used from any folder. The roots ([`ROOTS`]: the in-kernel tests and
//! benchmarks, which `main.rs` calls) may import any folder, and no folder of [`ORDER`] may
//! import them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The kernel's folders from the bottom layer to the top: a folder may import only folders
/// before it. See `docs/layout.md` for what each is.
pub const ORDER: &[&str] = &[
    "arch",
    "console",
    "random",
    "mm",
    "drivers",
    "fs",
    "sockets",
    "jord",
    "groundhog",
    "orchestrator",
    "kv",
    "module",
    "ufork",
    "cxl",
    "runtime",
    "syscalls",
    "net",
    "boot",
];

/// Folders above every layer: what the kernel does in `mode=test` and `mode=bench`.
pub const ROOTS: &[&str] = &["ktests", "bench"];

/// Modules of `arch/` that are one architecture's own rather than the seam: only `arch/` and the
/// roots may name them.
pub const ARCH_OWN: &[&str] = &["apic", "gdt", "pit", "boot"];

/// Folders where `unsafe` may appear (hardware and raw memory).
pub const UNSAFE_FOLDERS: &[&str] = &["arch", "mm", "drivers"];

/// Imports against [`ORDER`] that remain, each with why; the check fails on any other, and on
/// an entry here that no longer occurs (so the list only shrinks).
/// Entries: (file, imported folder, why).
pub const KNOWN_UPWARD: &[(&str, &str, &str)] = &[];

/// Files outside [`UNSAFE_FOLDERS`] that still hold `unsafe`, each with why; the check fails on
/// any other, and on an entry that no longer holds any. Entries: (file, why).
pub const KNOWN_UNSAFE: &[(&str, &str)] = &[];

/// One finding of the check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// `file` (in folder `from`) imports folder `to`, which is not below `from`.
    Upward {
        /// The importing file, relative to `kernel/src`.
        file: String,
        /// Its folder.
        from: String,
        /// The imported folder.
        to: String,
    },
    /// A folder not in [`ORDER`] or [`ROOTS`].
    Undeclared(String),
    /// `file` outside [`UNSAFE_FOLDERS`] uses `unsafe`.
    Unsafe(String),
    /// An entry of [`KNOWN_UPWARD`] or [`KNOWN_UNSAFE`] that no longer occurs.
    Stale(String),
    /// `file` outside `arch/` and the roots uses inline assembly or port I/O.
    Instructions(String),
    /// `file` names `arch::<module>`, one of [`ARCH_OWN`], outside `arch/` and the roots.
    ArchOwn {
        /// The file, relative to `kernel/src`.
        file: String,
        /// The architecture's own module it names.
        module: String,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Upward { file, from, to } => {
                write!(f, "{file}: `{from}` imports `{to}`, which is not below it")
            }
            Finding::Undeclared(folder) => write!(
                f,
                "kernel/src/{folder}/ is in no layer: add it to xtask's layers::ORDER"
            ),
            Finding::Unsafe(file) => write!(
                f,
                "{file}: `unsafe` outside {} (move the hardware access there)",
                UNSAFE_FOLDERS.join("/, ")
            ),
            Finding::Instructions(file) => write!(
                f,
                "{file}: inline assembly or port I/O outside arch/ (add it to the seam there)"
            ),
            Finding::ArchOwn { file, module } => write!(
                f,
                "{file}: names `arch::{module}`, which is x86_64's own: use the seam (time, \
                 platform, smp, cpu, …) or add what is missing to it"
            ),
            Finding::Stale(what) => write!(
                f,
                "{what} is listed as a known exception but no longer occurs: remove it"
            ),
        }
    }
}

/// One kernel source file: its path relative to `kernel/src` and its text.
#[derive(Clone, Debug)]
pub struct Source {
    /// Relative path, `/`-separated.
    pub path: String,
    /// The file's text.
    pub text: String,
}

impl Source {
    /// The folder the file belongs to; `None` for the files at the top of `kernel/src`.
    fn folder(&self) -> Option<&str> {
        self.path.split_once('/').map(|(folder, _)| folder)
    }
}

/// Reads every `.rs` file under `src` (the kernel's `kernel/src`).
pub fn read_tree(src: &Path) -> std::io::Result<Vec<Source>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::from(src)];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(src)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push(Source {
                    path: rel,
                    text: std::fs::read_to_string(&path)?,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The text of `text` without its comments (`//…` to the end of the line, `/* … */`), string
/// and character literals kept.
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str(&text[start..i.min(b.len())]);
            }
            _ => {
                // Keep whole UTF-8 characters.
                let c = text[i..].chars().next().unwrap_or(' ');
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first names of every `crate::` path in `code` (comments already stripped): `a` for
/// `crate::a::b`, `a` and `c` for `crate::{a::b, c}`.
fn crate_names(code: &str) -> Vec<&str> {
    names_after(code, "crate::")
}

/// The first names after every `<prefix>` in `code` (a path or a `{…}` group), where the
/// prefix does not continue an identifier.
fn names_after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `fjord_crate::…` or the like
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Items of the group at its top nesting level.
            let mut depth = 0usize;
            let mut item_start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        item_start = false;
                        let name = ident_at(&group[k..]);
                        if !name.is_empty() {
                            names.push(name);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident_at(rest);
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names
}

/// Which folder each crate-root name stands for: the folders themselves, the items `main.rs`
/// re-exports (`pub use boot::{a, b};`), and exported macros (by the folder defining them).
fn root_names(sources: &[Source]) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for s in sources {
        if let Some(folder) = s.folder() {
            names.insert(folder.to_owned(), folder.to_owned());
            let code = strip_comments(&s.text);
            let mut rest = code.as_str();
            while let Some(at) = rest.find("macro_rules!") {
                rest = &rest[at + "macro_rules!".len()..];
                let name = ident_at(rest.trim_start());
                if !name.is_empty() {
                    names.insert(name.to_owned(), folder.to_owned());
                }
            }
        }
    }
    for s in sources.iter().filter(|s| s.path == "main.rs") {
        for line in strip_comments(&s.text).lines() {
            let Some(rest) = line.trim().strip_prefix("pub use ") else {
                continue;
            };
            let Some((folder, items)) = rest.split_once("::") else {
                continue;
            };
            let items = items
                .trim_end_matches(';')
                .trim_matches(|c| c == '{' || c == '}');
            for item in items.split(',') {
                let item = item.trim();
                let name = item.rsplit(" as ").next().unwrap_or(item).trim();
                let name = name.rsplit("::").next().unwrap_or(name);
                if !name.is_empty() {
                    names.insert(name.to_owned(), folder.trim().to_owned());
                }
            }
        }
    }
    names
}

/// Whether `code` has inline assembly (`asm!`, `global_asm!`) or port I/O (`Port::`,
/// `port::Port`).
fn machine_instructions(code: &str) -> bool {
    [
        "asm!",
        "Port::",
        "port::Port",
        "PortWriteOnly",
        "PortReadOnly",
    ]
    .iter()
    .any(|p| code.contains(p))
}

fn uses_unsafe(code: &str) -> bool {
    let mut rest = code;
    while let Some(at) = rest.find("unsafe") {
        let before = rest[..at].chars().next_back();
        let after = rest[at + 6..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !word(before) && !word(after) {
            return true;
        }
        rest = &rest[at + 6..];
    }
    false
}

/// Checks `sources` against [`ORDER`], [`ROOTS`], [`UNSAFE_FOLDERS`] and the known exceptions.
pub fn check(sources: &[Source]) -> Vec<Finding> {
    check_with(sources, KNOWN_UPWARD, KNOWN_UNSAFE)
}

fn check_with(
    sources: &[Source],
    known_upward: &[(&str, &str, &str)],
    known_unsafe: &[(&str, &str)],
) -> Vec<Finding> {
    let level = |folder: &str| ORDER.iter().position(|&f| f == folder);
    let names = root_names(sources);
    let mut findings = Vec::new();
    let mut seen_upward = vec![false; known_upward.len()];
    let mut seen_unsafe = vec![false; known_unsafe.len()];
    let mut undeclared: Vec<String> = Vec::new();
    for s in sources {
        let Some(from) = s.folder() else { continue };
        let is_root = ROOTS.contains(&from);
        if level(from).is_none() && !is_root {
            if !undeclared.iter().any(|u| u == from) {
                undeclared.push(from.to_owned());
            }
            continue;
        }
        let code = strip_comments(&s.text);
        let mut targets: Vec<&str> = crate_names(&code)
            .into_iter()
            .filter_map(|n| names.get(n).map(String::as_str))
            .filter(|&to| to != from)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        for to in targets {
            let allowed = if is_root {
                true
            } else if ROOTS.contains(&to) {
                false
            } else {
                matches!((level(from), level(to)), (Some(a), Some(b)) if b < a)
            };
            if allowed {
                continue;
            }
            let known = known_upward
                .iter()
                .position(|&(file, t, _)| file == s.path && t == to);
            match known {
                Some(k) => seen_upward[k] = true,
                None => findings.push(Finding::Upward {
                    file: s.path.clone(),
                    from: from.to_owned(),
                    to: to.to_owned(),
                }),
            }
        }
        if from != "arch" && !is_root && machine_instructions(&code) {
            findings.push(Finding::Instructions(s.path.clone()));
        }
        if from != "arch" && !is_root {
            let mut own: Vec<&str> = names_after(&code, "arch::")
                .into_iter()
                .filter(|n| ARCH_OWN.contains(n))
                .collect();
            own.sort_unstable();
            own.dedup();
            findings.extend(own.into_iter().map(|m| Finding::ArchOwn {
                file: s.path.clone(),
                module: m.to_owned(),
            }));
        }
        if !UNSAFE_FOLDERS.contains(&from) && !is_root && uses_unsafe(&code) {
            match known_unsafe.iter().position(|&(file, _)| file == s.path) {
                Some(k) => seen_unsafe[k] = true,
                None => findings.push(Finding::Unsafe(s.path.clone())),
            }
        }
    }
    findings.extend(undeclared.into_iter().map(Finding::Undeclared));
    for (k, &(file, to, _)) in known_upward.iter().enumerate() {
        if !seen_upward[k] {
            findings.push(Finding::Stale(format!("{file} importing {to}")));
        }
    }
    for (k, &(file, _)) in known_unsafe.iter().enumerate() {
        if !seen_unsafe[k] {
            findings.push(Finding::Stale(format!("unsafe in {file}")));
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(path: &str, text: &str) -> Source {
        Source {
            path: path.to_owned(),
            text: text.to_owned(),
        }
    }

    #[test]
    fn names_of_paths_and_groups() {
        let code = "use crate::arch::cpu;\nuse crate::{mm::frames, jord::{self, state}};\n\
                    let x = crate::kv::get(); fjord_crate::no;";
        assert_eq!(crate_names(code), ["arch", "mm", "jord", "kv"]);
    }

    #[test]
    fn comments_are_skipped_and_strings_kept() {
        let code = "a // crate::boot\n/* crate::net */ b \"// kept\" 'é'";
        let stripped = strip_comments(code);
        assert!(!stripped.contains("crate::"));
        assert!(stripped.contains("\"// kept\""));
        assert!(stripped.contains('é'));
    }

    #[test]
    fn downward_imports_pass_and_upward_ones_fail() {
        let tree = [
            src("mm/a.rs", "use crate::arch::cpu;"),
            src("jord/a.rs", "use crate::mm::frames; use crate::runtime::x;"),
            src("runtime/a.rs", "use crate::jord;"),
            src("ktests/a.rs", "use crate::net::x;"),
            src("net/a.rs", "x"),
            src("arch/a.rs", "x"),
        ];
        let f = check_with(&tree, &[], &[]);
        assert_eq!(
            f,
            [Finding::Upward {
                file: "jord/a.rs".into(),
                from: "jord".into(),
                to: "runtime".into()
            }]
        );
    }

    #[test]
    fn macros_and_root_reexports_count_as_their_folder() {
        let tree = [
            src(
                "console/mod.rs",
                "#[macro_export] macro_rules! kprintln { () => {} }",
            ),
            src("boot/mod.rs", "pub const TIMER_HZ: u64 = 100;"),
            src("main.rs", "pub use boot::{TIMER_HZ, boot_main};"),
            src("arch/a.rs", "crate::kprintln!(); let hz = crate::TIMER_HZ;"),
        ];
        let f = check_with(&tree, &[], &[]);
        let upward = |to: &str| Finding::Upward {
            file: "arch/a.rs".into(),
            from: "arch".into(),
            to: to.into(),
        };
        assert_eq!(f, [upward("boot"), upward("console")]);
        assert!(f[0].to_string().contains("not below"));
    }

    #[test]
    fn roots_may_not_be_imported_and_new_folders_must_be_declared() {
        let tree = [
            src("net/a.rs", "use crate::ktests::x;"),
            src("ktests/a.rs", "x"),
            src("gizmo/a.rs", "x"),
        ];
        let f = check_with(&tree, &[], &[]);
        assert!(matches!(&f[0], Finding::Upward { to, .. } if to == "ktests"));
        assert_eq!(f[1], Finding::Undeclared("gizmo".into()));
    }

    #[test]
    fn only_arch_and_the_roots_name_the_architectures_own_modules() {
        let tree = [
            src(
                "orchestrator/a.rs",
                "crate::arch::apic::arm_oneshot(1); crate::arch::time::now();",
            ),
            src("boot/a.rs", "use crate::arch::{cpu, gdt};"),
            src("bench/a.rs", "crate::arch::apic::id();"),
            src("arch/a.rs", "use crate::arch::apic;"),
        ];
        assert_eq!(
            check_with(&tree, &[], &[]),
            [
                Finding::ArchOwn {
                    file: "orchestrator/a.rs".into(),
                    module: "apic".into()
                },
                Finding::ArchOwn {
                    file: "boot/a.rs".into(),
                    module: "gdt".into()
                },
            ]
        );
    }

    #[test]
    fn assembly_and_port_io_only_in_arch() {
        let tree = [
            src("mm/a.rs", "unsafe { core::arch::asm!(\"rep movsq\") }"),
            src(
                "net/a.rs",
                "x86_64::instructions::port::Port::<u32>::new(0xcf8)",
            ),
            src("arch/a.rs", "core::arch::asm!(\"hlt\")"),
            src("ktests/a.rs", "core::arch::asm!(\"int3\")"),
        ];
        assert_eq!(
            check_with(&tree, &[], &[("net/a.rs", "x")]),
            [
                Finding::Instructions("mm/a.rs".into()),
                Finding::Instructions("net/a.rs".into()),
                Finding::Stale("unsafe in net/a.rs".into()),
            ]
        );
    }

    #[test]
    fn unsafe_outside_arch_and_mm_fails_unless_known() {
        let tree = [
            src("arch/a.rs", "unsafe { x() }"),
            src("net/a.rs", "unsafe { x() }"),
            src("kv/a.rs", "let not_unsafe_here = 1; // unsafe"),
            src("ktests/a.rs", "unsafe { x() }"),
        ];
        assert_eq!(
            check_with(&tree, &[], &[]),
            [Finding::Unsafe("net/a.rs".into())]
        );
        assert!(check_with(&tree, &[], &[("net/a.rs", "driver")]).is_empty());
        assert_eq!(
            check_with(&tree, &[], &[("net/a.rs", "driver"), ("kv/a.rs", "gone")]),
            [Finding::Stale("unsafe in kv/a.rs".into())]
        );
    }

    #[test]
    fn known_upward_imports_pass_until_they_are_gone() {
        let tree = [
            src("jord/a.rs", "use crate::runtime::x;"),
            src("runtime/b.rs", ""),
        ];
        assert!(check_with(&tree, &[("jord/a.rs", "runtime", "why")], &[]).is_empty());
        let gone = [src("jord/a.rs", ""), src("runtime/b.rs", "")];
        assert_eq!(
            check_with(&gone, &[("jord/a.rs", "runtime", "why")], &[]),
            [Finding::Stale("jord/a.rs importing runtime".into())]
        );
    }
}
