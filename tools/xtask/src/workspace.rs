//! Where things are: the repository root, cargo's target directory, and how to call cargo.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (the directory holding the workspace `Cargo.toml`).
pub fn root() -> PathBuf {
    // This crate lives in `<root>/tools/xtask`.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tools/xtask has two ancestors")
        .to_path_buf()
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` if set (relative paths are taken from the
/// repository root, as cargo does when run there), otherwise `<root>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root().join(dir),
        _ => root().join("target"),
    }
}

/// A `cargo` command (the one in `$CARGO` when cargo started us) run from the repository root.
pub fn cargo() -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(program);
    command.current_dir(root());
    command
}

/// Renders a command as the user would type it, for progress and error messages.
pub fn display_command(command: &Command) -> String {
    // The program's file name only: `cargo`, not `/root/.rustup/toolchains/…/bin/cargo`.
    let program = Path::new(command.get_program());
    let mut text = program
        .file_name()
        .unwrap_or(program.as_os_str())
        .to_string_lossy()
        .into_owned();
    for arg in command.get_args() {
        let arg = arg.to_string_lossy();
        text.push(' ');
        if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '\'') {
            text.push_str(&format!("'{}'", arg.replace('\'', r"'\''")));
        } else {
            text.push_str(&arg);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_holds_the_workspace_manifest() {
        assert!(root().join("Cargo.toml").is_file());
        assert!(root().join("tools/xtask/Cargo.toml").is_file());
    }

    #[test]
    fn display_command_quotes_arguments_with_spaces() {
        let mut command = Command::new("/usr/bin/qemu");
        command.args(["-append", "mode=test log=info", "-m", "512"]);
        assert_eq!(
            display_command(&command),
            "qemu -append 'mode=test log=info' -m 512"
        );
    }
}
