//! Groundhog (EuroSys '23) on Jord's function instances: each instance is snapshotted right
//! after its `init`, and once a request's response is out, exactly the pages it dirtied are put
//! back from the snapshot before the instance serves its next request.
//!
//! - [`snapshot`]: the snapshot of an instance ([`Snapshot`]), the dirty-page scan and the
//!   page-by-page restore; in mode `none`, the layout an instance keeps ([`InitLayout`]);
//! - [`Saved`]: what an instance holds for its reuse, owned by the instance and freed with it.
//!
//! They run on Jord's page tables and frames, under Jord's lock, through Jord's narrow
//! instance-reuse API (`crate::jord::state::Jord::{kept_layout, scrub_keeping, backing_at,
//! watch_leaves}`); Groundhog's own state is the snapshot each instance owns. When restores run
//! (off the response path, stopped between steps for a request) is the instance pools' part
//! (`crate::module::warm`); the Groundhog modes, snapshot indexes, restore plans and metrics
//! are the host-tested `fjord-groundhog` crate.

pub mod snapshot;

pub use snapshot::{InitLayout, Snapshot};

/// What a function instance holds for its reuse between requests, as its function's Groundhog
/// mode says.
#[derive(Default)]
pub enum Saved {
    /// Nothing: a new instance, a μprocess, or mode `fresh` (restored to a new instance's state).
    #[default]
    Nothing,
    /// Mode `none`: the layout it keeps after its `init`.
    Layout(InitLayout),
    /// Mode `restore`: its snapshot after `init`.
    Snapshot(alloc::boxed::Box<Snapshot>),
}

impl core::fmt::Debug for Saved {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Saved::Nothing => "Nothing",
            Saved::Layout(_) => "Layout",
            Saved::Snapshot(_) => "Snapshot",
        })
    }
}
