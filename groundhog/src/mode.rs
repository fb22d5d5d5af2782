//! The per-function Groundhog mode: what happens to an instance between two requests.

/// What happens to a function's instance between two of its requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GroundhogMode {
    /// Groundhog: the instance is restored to its snapshot (taken after `init`) before it
    /// serves again: the pages the request dirtied are copied back, the layout put back.
    #[default]
    Restore,
    /// Warm reuse with no restore (Groundhog's insecure baseline, GH_NOP): a request sees what
    /// the previous one left in memory.
    None,
    /// A new protection domain per request (and its `init`): no reuse at all.
    Fresh,
    /// Fork per request (μFork): one instance runs `init` and becomes a zygote that never
    /// serves; each request runs in a child forked from it (copy on pointer access, pointers
    /// relocated), which ends with the request. The manifest may also say `instances=fork`.
    Fork,
}

impl GroundhogMode {
    /// Every mode, default first.
    pub const ALL: [GroundhogMode; 4] = [
        GroundhogMode::Restore,
        GroundhogMode::None,
        GroundhogMode::Fresh,
        GroundhogMode::Fork,
    ];

    /// The mode named `text` (`restore`, `none`, `fresh`, `fork`).
    pub fn parse(text: &str) -> Option<GroundhogMode> {
        Self::ALL.into_iter().find(|m| m.as_str() == text)
    }

    /// Its name, as the manifest and the HTTP API spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            GroundhogMode::Restore => "restore",
            GroundhogMode::None => "none",
            GroundhogMode::Fresh => "fresh",
            GroundhogMode::Fork => "fork",
        }
    }

    /// Whether instances are kept between requests at all (a fork-per-request zygote is kept,
    /// but never serves).
    pub const fn reuses(self) -> bool {
        !matches!(self, GroundhogMode::Fresh | GroundhogMode::Fork)
    }

    /// Whether an instance is snapshotted and restored between requests.
    pub const fn restores(self) -> bool {
        matches!(self, GroundhogMode::Restore)
    }
}

impl core::fmt::Display for GroundhogMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Groundhog mode a `?groundhog=…` query string asks for (`?instances=fork` is
/// `groundhog=fork`): `Ok(None)` when it names none, `Err(())` when it names one that does not
/// exist, or two.
#[allow(clippy::result_unit_err)]
pub fn from_query(query: Option<&str>) -> Result<Option<GroundhogMode>, ()> {
    let Some(q) = query else {
        return Ok(None);
    };
    let mut found = None;
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let mode = match (k, v) {
            ("groundhog", v) => GroundhogMode::parse(v).ok_or(())?,
            ("instances", "fork") => GroundhogMode::Fork,
            ("instances", _) => return Err(()),
            _ => continue,
        };
        if found.replace(mode).is_some() {
            return Err(());
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_restore_is_the_default() {
        for m in GroundhogMode::ALL {
            assert_eq!(GroundhogMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(GroundhogMode::default(), GroundhogMode::Restore);
        assert_eq!(GroundhogMode::parse("Restore"), None);
        assert_eq!(GroundhogMode::parse(""), None);
        assert!(GroundhogMode::Restore.restores() && GroundhogMode::Restore.reuses());
        assert!(!GroundhogMode::None.restores() && GroundhogMode::None.reuses());
        assert!(!GroundhogMode::Fresh.restores() && !GroundhogMode::Fresh.reuses());
        assert!(!GroundhogMode::Fork.restores() && !GroundhogMode::Fork.reuses());
    }

    #[test]
    fn query_names_at_most_one_known_mode() {
        assert_eq!(from_query(None), Ok(None));
        assert_eq!(from_query(Some("")), Ok(None));
        assert_eq!(from_query(Some("x=1")), Ok(None));
        assert_eq!(
            from_query(Some("groundhog=fresh")),
            Ok(Some(GroundhogMode::Fresh))
        );
        assert_eq!(
            from_query(Some("a=b&groundhog=none&c")),
            Ok(Some(GroundhogMode::None))
        );
        assert_eq!(from_query(Some("groundhog=bogus")), Err(()));
        assert_eq!(from_query(Some("groundhog")), Err(()));
        assert_eq!(from_query(Some("groundhog=none&groundhog=none")), Err(()));
        assert_eq!(
            from_query(Some("instances=fork")),
            Ok(Some(GroundhogMode::Fork))
        );
        assert_eq!(from_query(Some("instances=pool")), Err(()));
        assert_eq!(from_query(Some("instances=fork&groundhog=none")), Err(()));
    }
}
