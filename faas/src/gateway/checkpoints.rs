//! The checkpoint API's types (CXLfork): checkpoint identities, listings, and why a checkpoint
//! or a restore failed, as the runtime reports them and the gateway answers them.

use alloc::string::String;
use core::fmt;
pub use fjord_cxl::Tiering;

/// A checkpoint's identity in the API, `<slot>.<epoch>`: its directory slot in the shared
/// region and the slot's epoch when it was written (a slot reused later has another).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CheckpointId {
    /// The directory slot.
    pub slot: u32,
    /// The slot's epoch.
    pub epoch: u32,
}

impl CheckpointId {
    /// Parses `<slot>.<epoch>` (decimal, no sign, no leading `+`).
    pub fn parse(s: &str) -> Option<CheckpointId> {
        let (slot, epoch) = s.split_once('.')?;
        let num = |t: &str| {
            (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<u32>().ok())
                .flatten()
        };
        Some(CheckpointId {
            slot: num(slot)?,
            epoch: num(epoch)?,
        })
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.slot, self.epoch)
    }
}

/// One line of `GET /checkpoints`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Its identity.
    pub id: CheckpointId,
    /// The program (or function) it was taken from.
    pub name: String,
    /// `uprocess` or `function`.
    pub kind: &'static str,
    /// Data pages it holds in the region.
    pub pages: u64,
    /// The node (its entry in the region's node table) that wrote it.
    pub writer: u8,
    /// References the clones of every node hold on it.
    pub clones: u64,
}

/// A checkpoint written: `POST /processes/<pid>/checkpoint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// Its identity.
    pub id: CheckpointId,
    /// Data pages written.
    pub pages: u64,
}

/// Why a checkpoint was not written (nothing of it is left in the region).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointError {
    /// No such μprocess (404).
    NoSuchProcess,
    /// It kept running, or another checkpoint of it is under way (409).
    Busy,
    /// The region has no free directory slot or page left (503).
    RegionFull,
    /// This node has no shared region (501).
    NoRegion,
    /// No such function (404).
    NoSuchFunction,
    /// A program, not a function: checkpoint its μprocesses (400).
    NotAFunction,
    /// The function's `init` mapped memory beyond its instance VMA, which a checkpoint does
    /// not carry (409).
    MappedBeyondInstance,
    /// No memory for the function's zygote, or its `init` failed (503).
    NoMemory,
}

/// Why a checkpoint was not restored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// No ready checkpoint of that identity (404).
    NotFound,
    /// It was retired: its program was replaced or deleted, or it was deleted (404).
    Retired,
    /// Its metadata, image or pages fail their checks (422): refused, never restored.
    Corrupt,
    /// Its program is not deployed on this node (404).
    NoSuchProgram,
    /// The program deployed here is another version than the checkpoint's (409).
    OtherVersion,
    /// No room: the process table, the program's `max_processes` or memory (503).
    Full,
    /// This node has no shared region (501).
    NoRegion,
    /// An unknown `tiering=` (400).
    BadOptions,
}

/// A `tiering=` value that names no policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownTiering;

/// The tiering a restore's target names: `?tiering=write|access|hybrid` (default `write`).
pub fn tiering_from_target(target: &str) -> Result<Tiering, UnknownTiering> {
    let Some((_, query)) = target.split_once('?') else {
        return Ok(Tiering::default());
    };
    match query.split('&').find_map(|kv| kv.strip_prefix("tiering")) {
        None => Ok(Tiering::default()),
        Some(v) => v
            .strip_prefix('=')
            .and_then(Tiering::from_name)
            .ok_or(UnknownTiering),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_and_print() {
        let id = CheckpointId { slot: 3, epoch: 17 };
        assert_eq!(CheckpointId::parse("3.17"), Some(id));
        assert_eq!(alloc::format!("{id}"), "3.17");
        for bad in [
            "",
            "3",
            "3.",
            ".1",
            "+3.1",
            "3.+1",
            "3.1.2",
            "a.1",
            "4294967296.1",
            "-1.2",
        ] {
            assert_eq!(CheckpointId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn tiering_comes_from_the_query() {
        assert_eq!(
            tiering_from_target("/checkpoints/1.1/restore"),
            Ok(Tiering::MigrateOnWrite)
        );
        assert_eq!(
            tiering_from_target("/checkpoints/1.1/restore?x=1&tiering=access"),
            Ok(Tiering::MigrateOnAccess)
        );
        assert_eq!(
            tiering_from_target("/c?tiering=hybrid"),
            Ok(Tiering::Hybrid)
        );
        assert_eq!(tiering_from_target("/c?tiering=fast"), Err(UnknownTiering));
        assert_eq!(tiering_from_target("/c?tiering"), Err(UnknownTiering));
    }
}
