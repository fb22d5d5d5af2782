//! The workloads' functions by name: each workload crate's `routes` (the same handlers Fjord's
//! modules run, `apps/*/src/bin/*.rs`), instantiated with the [`Worker`] env.

use crate::worker::Worker;

/// A workload function as a worker runs it.
pub type Route = fjord_app_kit::Route<Worker>;

const HOTEL: &[(&str, Route)] = &fjord_app_hotel::routes::<Worker>();
const SOCIAL: &[(&str, Route)] = &fjord_app_social::routes::<Worker>();
const MEDIA: &[(&str, Route)] = &fjord_app_media::routes::<Worker>();
const HIPSTER: &[(&str, Route)] = &fjord_app_hipster::routes::<Worker>();

/// The functions of `workload` (`hotel`, `social`, `media`, `hipster`).
pub fn functions(workload: &str) -> Option<&'static [(&'static str, Route)]> {
    match workload {
        "hotel" => Some(HOTEL),
        "social" => Some(SOCIAL),
        "media" => Some(MEDIA),
        "hipster" => Some(HIPSTER),
        _ => None,
    }
}

/// The index of `name` in `table`.
pub fn index(table: &[(&str, Route)], name: &str) -> Option<u16> {
    table.iter().position(|(n, _)| *n == name).map(|i| i as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_its_entry_and_names_are_unique() {
        for op in fjord_faas::workloads::OPERATIONS {
            let table = functions(op.workload).unwrap();
            assert!(index(table, op.entry).is_some(), "{}", op.entry);
        }
        for w in fjord_faas::workloads::WORKLOADS {
            let table = functions(w).unwrap();
            for (i, (name, _)) in table.iter().enumerate() {
                assert!(name.starts_with(w));
                assert_eq!(index(table, name), Some(i as u16));
            }
        }
        assert!(functions("chain").is_none());
    }
}
