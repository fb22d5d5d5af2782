//! Copy modes and isolation levels, and the pure per-page decisions of fork: what happens to a
//! page at fork, and what a later fault on it means.
//!
//! The modes (μFork SOSP '25, §3.8 and §4.2):
//!
//! - [`CopyMode::Full`]: every page the child may write is copied (and relocated) during fork.
//! - [`CopyMode::CopyOnWrite`]: pages are shared read-only and copied on the first write by
//!   either side. The child can *read* a shared page holding parent pointers and follow them
//!   into the parent's area, so this is only allowed with [`IsolationLevel::None`].
//! - [`CopyMode::CopyOnAccess`]: the child's pages are left unmapped and any child access copies
//!   and relocates; the parent keeps read access and its writes copy for the child.
//! - [`CopyMode::CopyOnPointerAccess`]: on CHERI, pages are shared read-only and the child's
//!   first *capability load* (a fault-on-capability-load page bit) copies. x86_64 has no such
//!   bit, so Fjord approximates it: pages without tags behave as copy-on-write (nothing to
//!   relocate, safe to read), pages with tags behave as copy-on-access.
//!
//! In every mode code pages without tags share their frames read-execute, and the pages that
//! must be right before the child runs (GOT, allocator metadata, the top of the stack:
//! [`PageRole::Eager`]) are copied and relocated at fork.
//!
//! When the parent writes a page it still shares, the child gets the copy (its mapping moves to
//! a new frame) and the parent keeps the original frame, as in the paper; the kernel restores
//! the parent's write access once no child shares the frame.

use crate::area::{AreaLayout, PAGE_SIZE, Region};

/// Why a fork configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModeError {
    /// Copy-on-write asked for a μprocess whose isolation is not [`IsolationLevel::None`].
    CowNeedsIsolationOff,
    /// A raw mode or isolation code that names none.
    Unknown,
}

/// How fork gives the child its memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CopyMode {
    /// Copy everything during fork.
    Full,
    /// Share read-only, copy on write (isolation off only).
    CopyOnWrite,
    /// Leave the child's pages unmapped, copy on its first access.
    CopyOnAccess,
    /// Copy-on-write for untagged pages, copy-on-access for tagged ones.
    #[default]
    CopyOnPointerAccess,
}

impl CopyMode {
    /// The mode for a raw system-call code: 0 full, 1 CoW, 2 CoA, 3 CoPA.
    pub const fn from_raw(raw: u64) -> Result<CopyMode, ModeError> {
        match raw {
            0 => Ok(CopyMode::Full),
            1 => Ok(CopyMode::CopyOnWrite),
            2 => Ok(CopyMode::CopyOnAccess),
            3 => Ok(CopyMode::CopyOnPointerAccess),
            _ => Err(ModeError::Unknown),
        }
    }

    /// The raw code ([`CopyMode::from_raw`]'s inverse).
    pub const fn raw(self) -> u64 {
        self as u64
    }

    /// The mode of one fork call: the call's own choice if it made one, else the μprocess's;
    /// refused when the result is CoW and isolation is on.
    pub const fn for_call(
        process: CopyMode,
        call: Option<CopyMode>,
        isolation: IsolationLevel,
    ) -> Result<CopyMode, ModeError> {
        let mode = match call {
            Some(m) => m,
            None => process,
        };
        match mode.check(isolation) {
            Ok(()) => Ok(mode),
            Err(e) => Err(e),
        }
    }

    /// Checks that the mode is allowed at this isolation level.
    pub const fn check(self, isolation: IsolationLevel) -> Result<(), ModeError> {
        match (self, isolation) {
            (CopyMode::CopyOnWrite, IsolationLevel::NonAdversarial | IsolationLevel::Full) => {
                Err(ModeError::CowNeedsIsolationOff)
            }
            _ => Ok(()),
        }
    }
}

/// How strongly a μprocess is isolated (μFork §3.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IsolationLevel {
    /// No isolation: the μprocess may reach other areas; for trusted programs only.
    None,
    /// Non-adversarial fault isolation: memory isolation and argument checks.
    NonAdversarial,
    /// Adversarial isolation: also copies system-call buffers in and out (against TOCTTOU).
    #[default]
    Full,
}

impl IsolationLevel {
    /// The level for a raw code: 0 none, 1 non-adversarial, 2 full.
    pub const fn from_raw(raw: u64) -> Result<IsolationLevel, ModeError> {
        match raw {
            0 => Ok(IsolationLevel::None),
            1 => Ok(IsolationLevel::NonAdversarial),
            2 => Ok(IsolationLevel::Full),
            _ => Err(ModeError::Unknown),
        }
    }

    /// The raw code ([`IsolationLevel::from_raw`]'s).
    pub const fn raw(self) -> u64 {
        match self {
            IsolationLevel::None => 0,
            IsolationLevel::NonAdversarial => 1,
            IsolationLevel::Full => 2,
        }
    }

    /// True when the μprocess's PD maps its own area only.
    pub const fn isolates_memory(self) -> bool {
        !matches!(self, IsolationLevel::None)
    }

    /// True when system-call arguments are checked against the caller's area.
    pub const fn checks_arguments(self) -> bool {
        !matches!(self, IsolationLevel::None)
    }

    /// True when by-reference system-call buffers are copied into the kernel before use.
    pub const fn copies_buffers(self) -> bool {
        matches!(self, IsolationLevel::Full)
    }
}

/// A page's access rights in a PD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prot {
    /// Not mapped: any access faults.
    None,
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
    /// Read and execute.
    ReadExec,
}

/// What a page of the parent's area is for, as far as fork cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageRole {
    /// Code and read-only data (read-execute).
    Code,
    /// Read-write memory the child needs right from its first instruction: GOT, allocator
    /// metadata, the top of the stack. Copied and relocated at fork in every mode.
    Eager,
    /// Any other read-write memory.
    Data,
}

impl PageRole {
    /// The page's normal rights.
    pub const fn prot(self) -> Prot {
        match self {
            PageRole::Code => Prot::ReadExec,
            PageRole::Eager | PageRole::Data => Prot::ReadWrite,
        }
    }

    /// The role of the page at area offset `offset`: code in the code region; eager in the
    /// GOT, the allocator metadata, and the `stack_pages` pages of the stack from the one
    /// holding the stack pointer (`sp_offset`) upwards; data elsewhere.
    pub fn classify(
        layout: &AreaLayout,
        offset: u64,
        sp_offset: u64,
        stack_pages: u64,
    ) -> PageRole {
        match layout.region_at(offset) {
            Some(Region::Code) => PageRole::Code,
            Some(Region::Got | Region::AllocMeta) => PageRole::Eager,
            Some(Region::Stack) => {
                let sp_page = sp_offset & !(PAGE_SIZE - 1);
                let page = offset & !(PAGE_SIZE - 1);
                if page >= sp_page && (page - sp_page) / PAGE_SIZE < stack_pages {
                    PageRole::Eager
                } else {
                    PageRole::Data
                }
            }
            _ => PageRole::Data,
        }
    }
}

/// Where a child's page stands after fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageState {
    /// The child has its own frame (copied at fork or on a fault).
    Private,
    /// Code frame shared read-execute, never copied.
    SharedCode,
    /// The parent's frame, read-only in both; the first write by either copies.
    SharedReadOnly,
    /// Not mapped in the child (the parent reads it); the child's first access copies.
    Unmapped,
}

/// What fork does with one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ForkDecision {
    /// The child's page after fork.
    pub state: PageState,
    /// Copy the page into a new frame for the child now.
    pub copy_now: bool,
    /// Relocate the copy's tagged words (when copying now).
    pub relocate: bool,
    /// The parent's rights on the page after fork.
    pub parent: Prot,
    /// The child's rights on the page after fork.
    pub child: Prot,
}

/// Decides the fate of one parent page at fork: `role` says what the page is for and
/// `has_tags` whether its tag source finds any pointer in it.
pub const fn at_fork(
    mode: CopyMode,
    isolation: IsolationLevel,
    role: PageRole,
    has_tags: bool,
) -> Result<ForkDecision, ModeError> {
    if let Err(e) = mode.check(isolation) {
        return Err(e);
    }
    let own = role.prot();
    let shared = match role {
        PageRole::Code => Prot::ReadExec,
        _ => Prot::Read,
    };
    let state = match (role, mode) {
        (PageRole::Code, _) if !has_tags => PageState::SharedCode,
        (PageRole::Eager, _) | (_, CopyMode::Full) => PageState::Private,
        (_, CopyMode::CopyOnWrite) => PageState::SharedReadOnly,
        (_, CopyMode::CopyOnAccess) => PageState::Unmapped,
        (_, CopyMode::CopyOnPointerAccess) if has_tags => PageState::Unmapped,
        (_, CopyMode::CopyOnPointerAccess) => PageState::SharedReadOnly,
    };
    Ok(match state {
        PageState::Private => ForkDecision {
            state,
            copy_now: true,
            relocate: has_tags,
            parent: own,
            child: own,
        },
        PageState::SharedCode => ForkDecision {
            state,
            copy_now: false,
            relocate: false,
            parent: own,
            child: own,
        },
        PageState::SharedReadOnly => ForkDecision {
            state,
            copy_now: false,
            relocate: false,
            parent: shared,
            child: shared,
        },
        PageState::Unmapped => ForkDecision {
            state,
            copy_now: false,
            relocate: false,
            parent: shared,
            child: Prot::None,
        },
    })
}

/// A memory access that faulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A data read.
    Read,
    /// A data write.
    Write,
    /// An instruction fetch.
    Execute,
}

/// What the kernel does about a fault on a page fork left shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OnFault {
    /// Copy the page into a new frame for the child, relocate its tagged words if `relocate`,
    /// map it in the child with the page's normal rights; the page becomes
    /// [`PageState::Private`].
    CopyForChild {
        /// Relocate the copy's tagged words.
        relocate: bool,
    },
    /// The access is already allowed (another CPU resolved it first): retry.
    Spurious,
    /// Not a fork fault: an access the page's role forbids (a write to code, executing data)
    /// or a fault on a private page. Deliver it (the μprocess is killed by a fault).
    Deliver,
}

/// True when `role`'s normal rights allow `access`.
const fn role_allows(role: PageRole, access: Access) -> bool {
    matches!(
        (role, access),
        (PageRole::Code, Access::Read | Access::Execute)
            | (
                PageRole::Eager | PageRole::Data,
                Access::Read | Access::Write
            )
    )
}

/// The child faulted on a page in `state`.
pub const fn on_child_fault(
    state: PageState,
    role: PageRole,
    has_tags: bool,
    access: Access,
) -> OnFault {
    if !role_allows(role, access) {
        return OnFault::Deliver;
    }
    match (state, access) {
        (PageState::Private, _) => OnFault::Deliver,
        (PageState::SharedCode, _)
        | (PageState::SharedReadOnly, Access::Read | Access::Execute) => OnFault::Spurious,
        (PageState::SharedReadOnly, Access::Write) | (PageState::Unmapped, _) => {
            OnFault::CopyForChild { relocate: has_tags }
        }
    }
}

/// The parent wrote to a page whose child copy is in `state` (the parent's mapping is
/// read-only while a child shares the frame).
pub const fn on_parent_write(state: PageState, role: PageRole, has_tags: bool) -> OnFault {
    if !role_allows(role, Access::Write) {
        return OnFault::Deliver;
    }
    match state {
        PageState::SharedReadOnly | PageState::Unmapped => {
            OnFault::CopyForChild { relocate: has_tags }
        }
        PageState::Private | PageState::SharedCode => OnFault::Deliver,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODES: [CopyMode; 4] = [
        CopyMode::Full,
        CopyMode::CopyOnWrite,
        CopyMode::CopyOnAccess,
        CopyMode::CopyOnPointerAccess,
    ];
    const ROLES: [PageRole; 3] = [PageRole::Code, PageRole::Eager, PageRole::Data];
    const ACCESSES: [Access; 3] = [Access::Read, Access::Write, Access::Execute];

    #[test]
    fn cow_needs_isolation_off() {
        assert_eq!(CopyMode::CopyOnWrite.check(IsolationLevel::None), Ok(()));
        for iso in [IsolationLevel::NonAdversarial, IsolationLevel::Full] {
            assert_eq!(
                CopyMode::CopyOnWrite.check(iso),
                Err(ModeError::CowNeedsIsolationOff)
            );
            assert_eq!(
                at_fork(CopyMode::CopyOnWrite, iso, PageRole::Data, false),
                Err(ModeError::CowNeedsIsolationOff)
            );
        }
        for m in [
            CopyMode::Full,
            CopyMode::CopyOnAccess,
            CopyMode::CopyOnPointerAccess,
        ] {
            assert_eq!(m.check(IsolationLevel::Full), Ok(()));
        }
    }

    #[test]
    fn per_call_mode_overrides_the_process_mode() {
        let p = CopyMode::CopyOnPointerAccess;
        assert_eq!(CopyMode::for_call(p, None, IsolationLevel::Full), Ok(p));
        assert_eq!(
            CopyMode::for_call(p, Some(CopyMode::Full), IsolationLevel::Full),
            Ok(CopyMode::Full)
        );
        assert_eq!(
            CopyMode::for_call(p, Some(CopyMode::CopyOnWrite), IsolationLevel::Full),
            Err(ModeError::CowNeedsIsolationOff)
        );
        assert_eq!(
            CopyMode::for_call(CopyMode::CopyOnWrite, None, IsolationLevel::None),
            Ok(CopyMode::CopyOnWrite)
        );
    }

    #[test]
    fn raw_codes_round_trip() {
        for m in MODES {
            assert_eq!(CopyMode::from_raw(m.raw()), Ok(m));
        }
        assert_eq!(CopyMode::from_raw(4), Err(ModeError::Unknown));
        assert_eq!(IsolationLevel::from_raw(2), Ok(IsolationLevel::Full));
        assert_eq!(IsolationLevel::from_raw(3), Err(ModeError::Unknown));
        for l in [
            IsolationLevel::None,
            IsolationLevel::NonAdversarial,
            IsolationLevel::Full,
        ] {
            assert_eq!(IsolationLevel::from_raw(l.raw()), Ok(l));
        }
        assert_eq!(CopyMode::default(), CopyMode::CopyOnPointerAccess);
        assert!(IsolationLevel::Full.copies_buffers());
        assert!(!IsolationLevel::NonAdversarial.copies_buffers());
        assert!(IsolationLevel::NonAdversarial.isolates_memory());
        assert!(!IsolationLevel::None.checks_arguments());
    }

    #[test]
    fn fork_decisions_per_mode() {
        let iso = IsolationLevel::None;
        let d = |m, r, t| at_fork(m, iso, r, t).unwrap();
        for m in MODES {
            // Untagged code is shared, eager pages are copied, in every mode.
            assert_eq!(d(m, PageRole::Code, false).state, PageState::SharedCode);
            assert_eq!(d(m, PageRole::Code, false).child, Prot::ReadExec);
            let e = d(m, PageRole::Eager, true);
            assert!(e.copy_now && e.relocate && e.state == PageState::Private);
            assert_eq!(e.parent, Prot::ReadWrite);
        }
        let full = d(CopyMode::Full, PageRole::Data, false);
        assert!(full.copy_now && !full.relocate);
        let cow = d(CopyMode::CopyOnWrite, PageRole::Data, true);
        assert_eq!(
            (cow.state, cow.parent, cow.child),
            (PageState::SharedReadOnly, Prot::Read, Prot::Read)
        );
        let coa = d(CopyMode::CopyOnAccess, PageRole::Data, false);
        assert_eq!(
            (coa.state, coa.parent, coa.child),
            (PageState::Unmapped, Prot::Read, Prot::None)
        );
        let copa_plain = d(CopyMode::CopyOnPointerAccess, PageRole::Data, false);
        assert_eq!(copa_plain.state, PageState::SharedReadOnly);
        let copa_tagged = d(CopyMode::CopyOnPointerAccess, PageRole::Data, true);
        assert_eq!(copa_tagged.state, PageState::Unmapped);
        // Read-only data with pointers in the code region follows the mode.
        let code_tagged = d(CopyMode::CopyOnPointerAccess, PageRole::Code, true);
        assert_eq!(
            (code_tagged.state, code_tagged.parent),
            (PageState::Unmapped, Prot::ReadExec)
        );
    }

    #[test]
    fn child_faults() {
        use OnFault::*;
        let f = on_child_fault;
        assert_eq!(
            f(PageState::Unmapped, PageRole::Data, true, Access::Read),
            CopyForChild { relocate: true }
        );
        assert_eq!(
            f(PageState::Unmapped, PageRole::Code, true, Access::Execute),
            CopyForChild { relocate: true }
        );
        assert_eq!(
            f(
                PageState::SharedReadOnly,
                PageRole::Data,
                false,
                Access::Write
            ),
            CopyForChild { relocate: false }
        );
        assert_eq!(
            f(
                PageState::SharedReadOnly,
                PageRole::Data,
                false,
                Access::Read
            ),
            Spurious
        );
        assert_eq!(
            f(
                PageState::SharedCode,
                PageRole::Code,
                false,
                Access::Execute
            ),
            Spurious
        );
        assert_eq!(
            f(PageState::SharedCode, PageRole::Code, false, Access::Write),
            Deliver
        );
        assert_eq!(
            f(PageState::Unmapped, PageRole::Data, true, Access::Execute),
            Deliver
        );
        assert_eq!(
            f(PageState::Private, PageRole::Data, true, Access::Write),
            Deliver
        );
    }

    #[test]
    fn parent_writes() {
        assert_eq!(
            on_parent_write(PageState::Unmapped, PageRole::Data, true),
            OnFault::CopyForChild { relocate: true }
        );
        assert_eq!(
            on_parent_write(PageState::SharedReadOnly, PageRole::Eager, false),
            OnFault::CopyForChild { relocate: false }
        );
        assert_eq!(
            on_parent_write(PageState::SharedCode, PageRole::Code, false),
            OnFault::Deliver
        );
        assert_eq!(
            on_parent_write(PageState::Private, PageRole::Data, false),
            OnFault::Deliver
        );
    }

    #[test]
    fn no_decision_lets_the_child_read_a_tagged_shared_page_under_isolation() {
        // The invariant CoW breaks and CoA/CoPA keep: with isolation on, a page with pointers
        // is never readable by the child before it has been copied and relocated.
        for iso in [IsolationLevel::NonAdversarial, IsolationLevel::Full] {
            for m in MODES {
                for r in ROLES {
                    let Ok(d) = at_fork(m, iso, r, true) else {
                        continue;
                    };
                    if !d.copy_now {
                        assert_eq!(d.child, Prot::None, "{m:?} {r:?}");
                        for a in ACCESSES {
                            assert_ne!(on_child_fault(d.state, r, true, a), OnFault::Spurious);
                        }
                    } else {
                        assert!(d.relocate);
                    }
                }
            }
        }
    }

    #[test]
    fn classify_pages() {
        let l = AreaLayout::builder()
            .code(PAGE_SIZE)
            .got(PAGE_SIZE)
            .data(PAGE_SIZE)
            .alloc_meta(PAGE_SIZE)
            .heap(PAGE_SIZE)
            .stack(8 * PAGE_SIZE)
            .area_size(16 * PAGE_SIZE)
            .build()
            .unwrap();
        let sp = 16 * PAGE_SIZE - 100; // in the last page
        let c = |off| PageRole::classify(&l, off, sp, 2);
        assert_eq!(c(0), PageRole::Code);
        assert_eq!(c(PAGE_SIZE), PageRole::Eager);
        assert_eq!(c(2 * PAGE_SIZE), PageRole::Data);
        assert_eq!(c(3 * PAGE_SIZE), PageRole::Eager);
        assert_eq!(c(4 * PAGE_SIZE), PageRole::Data);
        assert_eq!(c(15 * PAGE_SIZE), PageRole::Eager);
        assert_eq!(c(14 * PAGE_SIZE), PageRole::Data);
        assert_eq!(c(8 * PAGE_SIZE), PageRole::Data);
        assert_eq!(
            PageRole::classify(&l, 13 * PAGE_SIZE, 13 * PAGE_SIZE, 2),
            PageRole::Eager
        );
        assert_eq!(
            PageRole::classify(&l, 14 * PAGE_SIZE, 13 * PAGE_SIZE, 2),
            PageRole::Eager
        );
        assert_eq!(
            PageRole::classify(&l, 15 * PAGE_SIZE, 13 * PAGE_SIZE, 2),
            PageRole::Data
        );
    }
}
