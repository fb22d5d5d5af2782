//! Tiering policies: how a clone takes its checkpoint's pages from the region into local
//! memory (CXLfork §5).

/// How a clone takes its pages from the region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tiering {
    /// A page without pointers is mapped in place, read-only, until its first write copies it
    /// into local memory (the default; a page with pointers is copied on first access).
    #[default]
    MigrateOnWrite,
    /// Every page is copied into local memory on its first access.
    MigrateOnAccess,
    /// The pages the checkpointed program had accessed lately (the checkpoint's accessed bits)
    /// are copied on first access, the others are handled as [`Tiering::MigrateOnWrite`].
    Hybrid,
}

impl Tiering {
    /// Every policy.
    pub const ALL: [Tiering; 3] = [
        Tiering::MigrateOnWrite,
        Tiering::MigrateOnAccess,
        Tiering::Hybrid,
    ];

    /// Its name in the HTTP API and in logs: `write`, `access` or `hybrid`.
    pub const fn name(self) -> &'static str {
        match self {
            Tiering::MigrateOnWrite => "write",
            Tiering::MigrateOnAccess => "access",
            Tiering::Hybrid => "hybrid",
        }
    }

    /// The policy named `name` (see [`Tiering::name`]).
    pub fn from_name(name: &str) -> Option<Tiering> {
        Tiering::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether a first read of a page copies it: `hot` says whether the checkpoint's accessed
    /// bits have the page. (A page with pointers is copied whatever the policy; a write always
    /// copies.)
    pub const fn copies_on_read(self, hot: bool) -> bool {
        match self {
            Tiering::MigrateOnWrite => false,
            Tiering::MigrateOnAccess => true,
            Tiering::Hybrid => hot,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tiering;

    #[test]
    fn names_round_trip_and_decide_reads() {
        for t in Tiering::ALL {
            assert_eq!(Tiering::from_name(t.name()), Some(t));
        }
        assert_eq!(Tiering::from_name("Write"), None);
        assert_eq!(Tiering::default(), Tiering::MigrateOnWrite);
        assert!(!Tiering::MigrateOnWrite.copies_on_read(true));
        assert!(Tiering::MigrateOnAccess.copies_on_read(false));
        assert!(Tiering::Hybrid.copies_on_read(true));
        assert!(!Tiering::Hybrid.copies_on_read(false));
    }
}
