//! The workloads' functions by name: the same `serve` handlers Fjord's modules run
//! (`apps/*/src/bin/*.rs`), instantiated with the [`Worker`] env. The tables match the
//! crates' own test routes.

use fjord_libos::function::FnError;

use crate::worker::Worker;

/// A workload function as a worker runs it.
pub type Route = fn(&mut Worker, &[u8], &mut [u8]) -> Result<usize, FnError>;

/// Hotel Reservation.
const HOTEL: &[(&str, Route)] = {
    use fjord_app_hotel::*;
    &[
        ("hotel-frontend", frontend::serve::<Worker>),
        ("hotel-search", search::serve::<Worker>),
        ("hotel-geo", geo::serve::<Worker>),
        ("hotel-rate", rate::serve::<Worker>),
        ("hotel-profile", profile::serve::<Worker>),
        ("hotel-user", user::serve::<Worker>),
        ("hotel-reservation", reservation::serve::<Worker>),
    ]
};

/// Social Network.
const SOCIAL: &[(&str, Route)] = {
    use fjord_app_social::*;
    &[
        ("social-frontend", frontend::serve::<Worker>),
        ("social-compose", compose::serve::<Worker>),
        ("social-text", text::serve::<Worker>),
        ("social-unique-id", unique_id::serve::<Worker>),
        ("social-user", user::serve::<Worker>),
        ("social-graph", graph::serve::<Worker>),
        ("social-storage", storage::serve::<Worker>),
        ("social-timeline", timeline::serve::<Worker>),
    ]
};

/// Media Service.
const MEDIA: &[(&str, Route)] = {
    use fjord_app_media::*;
    &[
        ("media-frontend", frontend::serve::<Worker>),
        ("media-unique-id", compose::unique_id::<Worker>),
        ("media-compose-review", compose::compose_review::<Worker>),
        ("media-page", page::serve::<Worker>),
        ("media-movie-info", info::movie_info::<Worker>),
        ("media-cast-info", info::cast_info::<Worker>),
        ("media-plot", info::plot_text::<Worker>),
        ("media-movie-review", reviews::movie_review::<Worker>),
        ("media-review-storage", reviews::storage::<Worker>),
    ]
};

/// Online Boutique.
const HIPSTER: &[(&str, Route)] = {
    use fjord_app_hipster::*;
    &[
        ("hipster-frontend", frontend::serve::<Worker>),
        ("hipster-cart", cart::serve::<Worker>),
        ("hipster-catalog", catalog::serve::<Worker>),
        ("hipster-currency", currency::serve::<Worker>),
        ("hipster-shipping", shipping::serve::<Worker>),
        ("hipster-payment", payment::serve::<Worker>),
        ("hipster-email", email::serve::<Worker>),
        ("hipster-checkout", checkout::serve::<Worker>),
    ]
};

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
