//! Groundhog (EuroSys '23) on Jord's function instances: each instance is snapshotted right
//! after its `init`, and once a request's response is out, exactly the pages it dirtied are put
//! back from the snapshot, off the response path, before the instance serves its next request.
//!
//! - [`instance`]: an instance's life around its requests: taken from its function's pool or
//!   made (`init`, then the snapshot), given back at the request's end;
//! - [`warm`]: the restores owed after responses, run when the executor has nothing else to do
//!   and stopped between steps for a request, and the pools' bounds applied.
//!
//! The snapshot, the dirty-page scan and the page-by-page restore themselves run on Jord's page
//! tables and frames, under its lock (`jord::state::{snapshot, restore}`); the Groundhog modes,
//! snapshot indexes, restore plans and metrics are the host-tested `fjord-groundhog` crate.

pub mod instance;
pub mod metrics;
pub mod warm;
