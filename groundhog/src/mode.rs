//! The per-function isolation mode between two requests of one instance.

/// What happens to a function's instance between two of its requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IsolationMode {
    /// Groundhog: the instance is restored to its snapshot (taken after `init`) before it
    /// serves again: the pages the request dirtied are copied back, the layout put back.
    #[default]
    Restore,
    /// Warm reuse with no restore (Groundhog's insecure baseline, GH_NOP): a request sees what
    /// the previous one left in memory.
    None,
    /// A new protection domain per request (and its `init`): no reuse at all.
    Fresh,
}

impl IsolationMode {
    /// Every mode, default first.
    pub const ALL: [IsolationMode; 3] = [
        IsolationMode::Restore,
        IsolationMode::None,
        IsolationMode::Fresh,
    ];

    /// The mode named `text` (`restore`, `none`, `fresh`).
    pub fn parse(text: &str) -> Option<IsolationMode> {
        Self::ALL.into_iter().find(|m| m.as_str() == text)
    }

    /// Its name, as the manifest and the HTTP API spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            IsolationMode::Restore => "restore",
            IsolationMode::None => "none",
            IsolationMode::Fresh => "fresh",
        }
    }

    /// Whether instances are kept between requests at all.
    pub const fn reuses(self) -> bool {
        !matches!(self, IsolationMode::Fresh)
    }

    /// Whether an instance is snapshotted and restored between requests.
    pub const fn restores(self) -> bool {
        matches!(self, IsolationMode::Restore)
    }
}

impl core::fmt::Display for IsolationMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The isolation mode a `?isolation=…` query string asks for: `Ok(None)` when it names none,
/// `Err(())` when it names one that does not exist.
#[allow(clippy::result_unit_err)]
pub fn from_query(query: Option<&str>) -> Result<Option<IsolationMode>, ()> {
    let Some(q) = query else {
        return Ok(None);
    };
    let mut found = None;
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == "isolation" {
            if found.is_some() {
                return Err(());
            }
            found = Some(IsolationMode::parse(v).ok_or(())?);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_restore_is_the_default() {
        for m in IsolationMode::ALL {
            assert_eq!(IsolationMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(IsolationMode::default(), IsolationMode::Restore);
        assert_eq!(IsolationMode::parse("Restore"), None);
        assert_eq!(IsolationMode::parse(""), None);
        assert!(IsolationMode::Restore.restores() && IsolationMode::Restore.reuses());
        assert!(!IsolationMode::None.restores() && IsolationMode::None.reuses());
        assert!(!IsolationMode::Fresh.restores() && !IsolationMode::Fresh.reuses());
    }

    #[test]
    fn query_names_at_most_one_known_mode() {
        assert_eq!(from_query(None), Ok(None));
        assert_eq!(from_query(Some("")), Ok(None));
        assert_eq!(from_query(Some("x=1")), Ok(None));
        assert_eq!(
            from_query(Some("isolation=fresh")),
            Ok(Some(IsolationMode::Fresh))
        );
        assert_eq!(
            from_query(Some("a=b&isolation=none&c")),
            Ok(Some(IsolationMode::None))
        );
        assert_eq!(from_query(Some("isolation=bogus")), Err(()));
        assert_eq!(from_query(Some("isolation")), Err(()));
        assert_eq!(from_query(Some("isolation=none&isolation=none")), Err(()));
    }
}
