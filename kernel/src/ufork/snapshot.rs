//! What a checkpoint of a μprocess takes from it and what a restore makes of it (CXLfork's
//! checkpoint and restore, which `crate::cxl` writes to and reads from the shared region).
//!
//! [`freeze`] holds a μprocess still while its pages are read: it must not be running (a
//! running one is [`FreezeError::Running`]; try again after its slice), and until the
//! [`Frozen`] guard goes its steps park instead of running. The μprocess itself goes on
//! unchanged afterwards. What travels is [`ProcessImage`]: registers, precise tags, the
//! console descriptors, copy mode and isolation level. Pipes, sockets, disk files and children
//! stay behind: in a clone a system call the μprocess was blocked in returns as it would had
//! they gone (`sleep` returns 0, `waitpid` [`AbiError::NoChild`], a call on a descriptor
//! [`AbiError::BadFd`]).
//!
//! [`restore`] makes a new μprocess (a child of init) of the same program, whose module must be
//! the same file (its digest), in a fresh area of this node wherever Jord puts it; the caller
//! provides its pages by attaching a pager to the area before it first runs, and its
//! registers are relocated here from the checkpoint's area to the new one, as `fork` does.

use super::{
    Proc, SpawnOptions, area_of, area_of_instance, files, owner_of, start_with, tags, with,
};
use crate::arch::user::UserContext;
use crate::jord;
use crate::module::LoadedFunction;
use crate::module::instance::{self, Instance};
use alloc::string::String;
use alloc::vec::Vec;
use fjord_libos::abi::{Error as AbiError, encode};
use fjord_pd::PdId;
use fjord_ufork::area::Area;
use fjord_ufork::image::{ProcessImage, REGISTERS};
use fjord_ufork::process::Pid;
use fjord_ufork::relocate::CodeMove;
use fjord_ufork::tags::ShadowTags;

/// Why a μprocess cannot be frozen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreezeError {
    /// No such μprocess (or it ended).
    NoSuchProcess,
    /// It runs on a CPU now: try again after its slice.
    Running,
    /// Another checkpoint holds it.
    Busy,
}

/// A μprocess held still for a checkpoint: what travels of it. Dropping it lets the μprocess
/// run again.
pub struct Frozen {
    pid: Pid,
    /// Its PD.
    pub pd: PdId,
    /// Its area VMA: base and length.
    pub area: (u64, u64),
    /// Everything but its pages.
    pub image: ProcessImage,
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let missed = with(|p| {
            let pr = p.procs.get_mut(self.pid)?;
            pr.frozen = false;
            Some(core::mem::take(&mut pr.missed))
        });
        if missed == Some(true) {
            super::wake([self.pid]);
        }
    }
}

/// The registers of `ctx` in the image's order (`rip`, `rsp`, `rflags`, thread pointer, then
/// the general registers in `Gpr::ALL` order).
fn registers_of(ctx: &UserContext) -> [u64; REGISTERS] {
    let f = &ctx.frame;
    [
        f.rip,
        f.rsp,
        f.rflags,
        ctx.fs_base,
        f.rax,
        f.rbx,
        f.rcx,
        f.rdx,
        f.rsi,
        f.rdi,
        f.rbp,
        f.r8,
        f.r9,
        f.r10,
        f.r11,
        f.r12,
        f.r13,
        f.r14,
        f.r15,
    ]
}

/// The flags a user context may hold: carry, parity, adjust, zero, sign, direction, overflow;
/// interrupts always on. A checkpoint cannot raise a clone's I/O privilege or trap flag.
const USER_FLAGS: u64 = 0xcd5;

/// A user context with the image's registers.
fn context_of(r: &[u64; REGISTERS]) -> UserContext {
    let mut ctx = UserContext::new(r[0], r[1], [0; 4]);
    ctx.fs_base = r[3];
    let f = &mut ctx.frame;
    f.rflags = (r[2] & USER_FLAGS) | 0x202;
    let gprs = [
        &mut f.rax, &mut f.rbx, &mut f.rcx, &mut f.rdx, &mut f.rsi, &mut f.rdi, &mut f.rbp,
        &mut f.r8, &mut f.r9, &mut f.r10, &mut f.r11, &mut f.r12, &mut f.r13, &mut f.r14,
        &mut f.r15,
    ];
    for (g, v) in gprs.into_iter().zip(&r[4..]) {
        *g = *v;
    }
    ctx
}

/// Holds μprocess `pid` still and describes it (see the module documentation); its pages are
/// the caller's to read through Jord while the guard lives. The image's page list is left
/// empty: the caller fills it with the pages it writes.
pub fn freeze(pid: u64) -> Result<Frozen, FreezeError> {
    with(|p| {
        let pid = p.table.lookup(pid).ok_or(FreezeError::NoSuchProcess)?;
        let entry = p.table.get(pid).ok_or(FreezeError::NoSuchProcess)?;
        if matches!(entry.state(), fjord_ufork::process::State::Zombie(_)) {
            return Err(FreezeError::NoSuchProcess);
        }
        let pr = p.procs.get_mut(pid).ok_or(FreezeError::NoSuchProcess)?;
        if pr.frozen {
            return Err(FreezeError::Busy);
        }
        let mut ctx = pr.ctx.ok_or(FreezeError::Running)?;
        // The call it is blocked in, as a clone without its pipes, sockets and children sees it.
        if let Some(b) = pr.blocked {
            ctx.frame.rax = match b {
                super::Blocked::Sleep => 0,
                super::Blocked::Wait(..) => encode(Err(AbiError::NoChild)),
                _ => encode(Err(AbiError::BadFd)),
            };
        }
        pr.frozen = true;
        let console_fds = pr
            .fds
            .iter()
            .filter(|&(_, id)| matches!(p.files.get(id), Some(files::File::Console)))
            .map(|(fd, _)| fd)
            .collect();
        let image = describe(pr, &ctx, console_fds);
        Ok(Frozen {
            pid,
            pd: pr.instance.pd,
            area: pr.area,
            image,
        })
    })
}

/// The image of `pr` stopped at `ctx` (pages not listed yet).
fn describe(pr: &Proc, ctx: &UserContext, console_fds: Vec<u32>) -> ProcessImage {
    let (base, len) = pr.area;
    let shadow = pr.source.as_ref().map(|s| s.tags());
    let mut slots: Vec<u32> = shadow
        .into_iter()
        .flat_map(|shadow| {
            shadow
                .tagged_pages()
                .flat_map(|page| shadow.tagged_in_page(page))
        })
        .filter_map(|a| u32::try_from(a.checked_sub(base)? / 8).ok())
        .filter(|&s| u64::from(s) < len / 8)
        .collect();
    slots.sort_unstable();
    slots.dedup();
    let shared = pr
        .func
        .program
        .as_ref()
        .map_or(0, |prog| prog.image.shared.len() as u32);
    ProcessImage {
        program: String::from(pr.func.manifest.name.as_str()),
        digest: pr.func.digest,
        code_base: 0,
        area_base: base,
        area_len: len,
        shared_pages: shared,
        registers: registers_of(ctx),
        mode: pr.mode,
        isolation: pr.isolation,
        console_fds,
        tags: slots,
        pages: Vec::new(),
        hot: Vec::new(),
    }
}

/// Why a checkpoint could not be restored here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// Its program is not deployed on this node (or was deleted).
    NoSuchProgram,
    /// The program deployed here is another version (its module differs), or not a program.
    OtherVersion,
    /// The image does not fit the program (its area, its options).
    BadImage,
    /// The process table or the program's `max_processes` is full.
    TableFull,
    /// No memory (or PD) for its area, or the pager could not attach.
    NoMemory,
}

/// What a restore hands the pager it attaches to the new area.
pub struct Attach<'a> {
    /// The clone's PD.
    pub pd: PdId,
    /// Base of its area VMA.
    pub base: u64,
    /// The checkpoint's area (what its pages point into).
    pub from: Area,
    /// The clone's area.
    pub to: Area,
    /// The tag source of the checkpoint's pages (its precise tags, as `tags=` reads them).
    pub source: &'a tags::Source,
    /// Where the code outside the area moved, when a function's checkpoint is cloned on a
    /// node that mapped the function's code elsewhere.
    pub code: Option<CodeMove>,
}

/// Starts a μprocess from `image` (see the module documentation), with `attach` making its
/// area hold the checkpoint's pages before it first runs. Returns its PID.
pub fn restore(
    image: &ProcessImage,
    attach: impl FnOnce(Attach<'_>) -> Result<(), ()>,
) -> Result<u64, RestoreError> {
    let f = crate::module::lookup(&image.program).ok_or(RestoreError::NoSuchProgram)?;
    if f.manifest.kind != fjord_faas::module::ModuleKind::Program || f.digest != image.digest {
        return Err(RestoreError::OtherVersion);
    }
    let options = SpawnOptions {
        mode: image.mode,
        isolation: image.isolation,
    };
    let from = image.area().map_err(|_| RestoreError::BadImage)?;
    let inst =
        Instance::create_for_fork_at(&f, image.area_base).map_err(|_| RestoreError::NoMemory)?;
    let (base, len) = area_of_instance(&f, &inst);
    let Some(to) = area_of(base, len).filter(|_| len == image.area_len) else {
        instance::destroy(inst.pd);
        return Err(RestoreError::BadImage);
    };
    jord::tenant::begin_uprocess(inst.pd, f.namespace, super::log_limit(&f));
    let bound = f.manifest.max_processes;
    let owner = owner_of(f.manifest.name.as_str());
    let Ok(pid) = with(|p| p.table.start(owner, usize::from(bound))) else {
        instance::destroy(inst.pd);
        return Err(RestoreError::TableFull);
    };
    let Ok(source) = attach_pages(image, (inst.pd, base), (from, to), None, attach) else {
        instance::destroy(inst.pd);
        with(|p| p.table.discard(pid)).ok();
        return Err(RestoreError::NoMemory);
    };
    let mut ctx = context_of(&image.registers);
    super::relocate_registers(&mut ctx, &from, &to, &*source);
    let fds = with(|p| files::console_fds_at(p, &image.console_fds));
    let own = tags::source(
        source
            .tags()
            .copy_for(&to)
            .unwrap_or_else(|_| ShadowTags::new(to)),
    );
    start_with(
        pid,
        f,
        inst,
        (base, len),
        ctx,
        fds,
        (options, own, bound),
        true,
    )
    .map_err(|_| RestoreError::TableFull)?;
    Ok(u64::from(pid.raw()))
}

/// A fork-per-request function's zygote (made, its `init` run, if it has none) as a
/// checkpoint describes it: its PD, its instance area (base, length) and its image (no
/// registers: each request enters the function afresh; its code outside the area, at the code
/// base the image records). The zygote never runs again, so it needs no freezing.
pub fn describe_zygote(
    f: &LoadedFunction,
) -> Result<(PdId, (u64, u64), ProcessImage), crate::orchestrator::InvokeFailure> {
    let (pd, boundary) = super::zygote(f)?;
    Ok(describe_instance(f, pd, boundary))
}

/// An instance of `f` (PD `pd`, memory boundary `boundary`) that ran its `init` and serves no
/// request, as a checkpoint describes it: its PD, its instance VMA (base, length) and its
/// image (see [`describe_zygote`]).
pub fn describe_instance(
    f: &LoadedFunction,
    pd: PdId,
    boundary: u64,
) -> (PdId, (u64, u64), ProcessImage) {
    let m = &f.manifest;
    let image = f.image_in_area();
    let base = boundary - m.stack_size - image;
    let len = image + m.stack_size + m.heap_size;
    let described = ProcessImage {
        program: String::from(m.name.as_str()),
        digest: f.digest,
        code_base: f.image.base,
        area_base: base,
        area_len: len,
        shared_pages: 0,
        registers: [0; REGISTERS],
        mode: fjord_ufork::copy_mode::CopyMode::CopyOnPointerAccess,
        isolation: fjord_ufork::copy_mode::IsolationLevel::Full,
        console_fds: Vec::new(),
        tags: Vec::new(),
        pages: Vec::new(),
        hot: Vec::new(),
    };
    (pd, (base, len), described)
}

/// A request's instance of the fork-per-request function `f` cloned from a checkpoint of a
/// zygote of it (`image`), instead of forked from a zygote of this node: a fresh instance whose
/// area `attach` makes hold the checkpoint's pages. The same module (digest) is needed; where
/// this node mapped its code elsewhere, the pointers into the code move with it.
pub fn clone_instance(
    f: &LoadedFunction,
    image: &ProcessImage,
    attach: impl FnOnce(Attach<'_>) -> Result<(), ()>,
) -> Result<Instance, RestoreError> {
    if f.digest != image.digest {
        return Err(RestoreError::OtherVersion);
    }
    let code = code_move(f, image);
    let from = image.area().map_err(|_| RestoreError::BadImage)?;
    let inst =
        Instance::create_for_fork_at(f, image.area_base).map_err(|_| RestoreError::NoMemory)?;
    let (base, len) = area_of_instance(f, &inst);
    let Some(to) = area_of(base, len).filter(|_| len == image.area_len) else {
        instance::destroy(inst.pd);
        return Err(RestoreError::BadImage);
    };
    if attach_pages(image, (inst.pd, base), (from, to), code, attach).is_err() {
        instance::destroy(inst.pd);
        return Err(RestoreError::NoMemory);
    }
    Ok(inst)
}

/// Where `f`'s code moved from the code address a checkpoint of it (`image`) records, if this
/// node mapped it elsewhere: the pointers into it that a clone moves.
pub fn code_move(f: &LoadedFunction, image: &ProcessImage) -> Option<CodeMove> {
    (f.image.base != image.code_base).then_some(CodeMove {
        from: image.code_base,
        len: f.image.len,
        to: f.image.base,
    })
}

/// Has `attach` make the new area (`pd`, VMA `base`) hold the checkpoint's pages, relocated
/// from `from` to `to` by the tag source of the image's precise tags, which it returns.
fn attach_pages(
    image: &ProcessImage,
    (pd, base): (PdId, u64),
    (from, to): (Area, Area),
    code: Option<CodeMove>,
    attach: impl FnOnce(Attach<'_>) -> Result<(), ()>,
) -> Result<tags::Source, ()> {
    let mut shadow = ShadowTags::new(from);
    for &slot in &image.tags {
        let _ = shadow.set(from.base() + u64::from(slot) * 8);
    }
    let source = tags::source(shadow);
    attach(Attach {
        pd,
        base,
        from,
        to,
        source: &source,
        code,
    })?;
    Ok(source)
}
