//! Typed errors of PrivLib calls and faults of the translation lookup.

/// Why a PrivLib operation was refused. Operations never panic on bad input; they return one of
/// these and leave the tables unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// A malformed argument: zero or oversized length, unknown `prot` bits, a length that does
    /// not match the VMA, an operation that does not apply to this kind of VMA (for example
    /// `pmove` of a Global VMA), or a table configuration that does not fit the address layout.
    InvalidArgs,
    /// Not the base of a possible VMA: outside the Jord region, an unused size-class code, an
    /// index beyond the class's table capacity, or an address that is not where a VMA starts.
    BadAddress,
    /// A well-formed VMA address whose table slot is free.
    NotMapped,
    /// The caller lacks the right: not the owner, a permission that is not a subset of the
    /// caller's, a Privileged VMA, or a PD the caller did not create.
    AccessDenied,
    /// The PD id names no live PD (forged, out of range, or already destroyed).
    NoSuchPd,
    /// The PD's call state forbids the operation (entering a running PD, destroying a PD that
    /// is running or waiting for a callee, resuming one that is not suspended).
    Busy,
    /// A free list ran dry: no free VMA in any class that fits, no free PD id, or no free
    /// overflow list.
    NoMemory,
    /// A bound the kernel set on the caller was reached: its creation tree holds as many PDs
    /// as its root's limit allows (see `PdTable::set_tree_limit`).
    LimitReached,
}

impl Error {
    /// Every error, for tests and for building code tables in the system-call layer.
    pub const ALL: [Error; 8] = [
        Error::InvalidArgs,
        Error::BadAddress,
        Error::NotMapped,
        Error::AccessDenied,
        Error::NoSuchPd,
        Error::Busy,
        Error::NoMemory,
        Error::LimitReached,
    ];
}

/// Result of a PrivLib operation.
pub type Result<T> = core::result::Result<T, Error>;

/// Why the translation lookup (the VLB refill, here the page-fault fill) found no grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The address is outside the Jord region or names an unused size class or an index beyond
    /// the table's capacity: not a Jord translation at all.
    NotJord,
    /// The VMA slot is free, or the offset lies beyond the VMA's (page-rounded) length.
    Unmapped,
    /// The VMA exists but the PD has no permission on it.
    NoPermission,
    /// The VMA is Privileged and the PD is not the kernel.
    Privileged,
}
