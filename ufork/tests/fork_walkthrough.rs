//! One fork from start to finish with the crate's pieces, over a toy memory of pages: a parent
//! μprocess with code, a GOT, a heap holding a linked list, TLS and a stack; a copy-on-pointer-
//! access fork; the child's faults; and the child seeing its own list.

use fjord_ufork::area::{Area, AreaLayout, PAGE_SIZE, Region};
use fjord_ufork::copy_mode::{
    Access, CopyMode, IsolationLevel, OnFault, PageRole, PageState, Prot, at_fork, on_child_fault,
};
use fjord_ufork::process::{Pid, ProcessTable, WaitOptions, WaitOutcome, WaitTarget};
use fjord_ufork::relocate::{Gpr, RegTags, Registers, relocate_page};
use fjord_ufork::source::{TagSource, emulated};
use fjord_ufork::tags::{PageWords, SLOTS_PER_PAGE, ShadowTags};
use std::collections::BTreeMap;

/// Pages by address.
type Memory = BTreeMap<u64, PageWords>;

fn word(mem: &Memory, addr: u64) -> u64 {
    mem[&(addr & !(PAGE_SIZE - 1))][((addr % PAGE_SIZE) / 8) as usize]
}

fn store(mem: &mut Memory, addr: u64, value: u64) {
    mem.entry(addr & !(PAGE_SIZE - 1))
        .or_insert([0; SLOTS_PER_PAGE])[((addr % PAGE_SIZE) / 8) as usize] = value;
}

#[test]
fn copy_on_pointer_access_fork() {
    let layout = AreaLayout::builder()
        .code(2 * PAGE_SIZE)
        .got(PAGE_SIZE)
        .data(PAGE_SIZE)
        .alloc_meta(PAGE_SIZE)
        .heap(4 * PAGE_SIZE)
        .tls(PAGE_SIZE)
        .stack(4 * PAGE_SIZE)
        .area_size(1 << 20)
        .build()
        .unwrap();
    let parent = Area::new(0x4000_0000, layout.size()).unwrap();
    let child = Area::new(0x4010_0000, layout.size()).unwrap();
    let r = |region| layout.region_in(&parent, region).unwrap();

    // The parent's memory. The loader tags the GOT entry; the program builds a list in the
    // heap itself (untagged: only inferred tags find it) and keeps a counter that happens to
    // look like a heap address in data.
    let mut mem = Memory::new();
    let mut tags = ShadowTags::new(parent);
    for page in parent.page_addrs() {
        mem.insert(page, [0; SLOTS_PER_PAGE]);
    }
    let got = r(Region::Got).start;
    store(&mut mem, got, r(Region::Data).start);
    tags.set(got).unwrap();
    let (n1, n2) = (
        r(Region::Heap).start + 64,
        r(Region::Heap).start + 2 * PAGE_SIZE,
    );
    store(&mut mem, n1, n2); // n1.next = n2
    store(&mut mem, n1 + 8, 111); // n1.value
    store(&mut mem, n2, 0);
    store(&mut mem, n2 + 8, 222);
    store(&mut mem, r(Region::AllocMeta).start, n1); // the allocator's list head
    let plain = r(Region::Data).start + 8;
    store(&mut mem, plain, 42); // an integer far from any area
    let heap_page_without_pointers = r(Region::Heap).start + PAGE_SIZE;
    store(&mut mem, heap_page_without_pointers, 7);
    let sp = r(Region::Stack).end - 64;
    store(&mut mem, sp, n1); // a local variable pointing at the list

    let regs = Registers {
        rip: r(Region::Code).start + 0x123,
        rsp: sp,
        fs_base: r(Region::Tls).start,
        gpr: {
            let mut g = [0; 15];
            g[Gpr::Rbx.index()] = n2;
            g[Gpr::Rax.index()] = 57;
            g
        },
        rflags: 0x202,
    };

    // fork.
    let mut procs = ProcessTable::new(16, 100).unwrap();
    let ppid = procs.fork(Pid::INIT).unwrap();
    let cpid = procs.fork(ppid).unwrap();
    let source = emulated(&tags);
    let mut child_tags = tags.copy_for(&child).unwrap();
    let mode = CopyMode::for_call(CopyMode::default(), None, IsolationLevel::Full).unwrap();
    let mut child_mem = Memory::new();
    let mut states = BTreeMap::new();
    for page in parent.page_addrs() {
        let off = page - parent.base();
        let role = PageRole::classify(&layout, off, sp - parent.base(), 1);
        let has_tags = source.page_has_tags(page, &mem[&page]);
        let d = at_fork(mode, IsolationLevel::Full, role, has_tags).unwrap();
        if d.copy_now {
            let mut copy = mem[&page];
            relocate_page(&source, &parent, &child, page, &mut copy).unwrap();
            child_mem.insert(child.base() + off, copy);
        }
        states.insert(off, (d.state, role, has_tags, d.child));
    }
    let child_regs = regs
        .fork_child(&parent, &child, RegTags::inferred(&regs, &parent))
        .unwrap();

    // What fork decided.
    let state_of = |addr: u64| states[&((addr & !(PAGE_SIZE - 1)) - parent.base())];
    assert_eq!(state_of(r(Region::Code).start).0, PageState::SharedCode);
    assert_eq!(state_of(got).0, PageState::Private);
    assert_eq!(state_of(r(Region::AllocMeta).start).0, PageState::Private);
    assert_eq!(state_of(sp).0, PageState::Private);
    assert_eq!(state_of(n1).0, PageState::Unmapped);
    assert_eq!(state_of(n1).3, Prot::None);
    assert_eq!(
        state_of(heap_page_without_pointers).0,
        PageState::SharedReadOnly
    );

    // Eager pages are the child's already, relocated.
    let c = |addr: u64| addr - parent.base() + child.base();
    assert_eq!(word(&child_mem, c(got)), c(r(Region::Data).start));
    assert_eq!(word(&child_mem, c(r(Region::AllocMeta).start)), c(n1));
    assert_eq!(word(&child_mem, c(sp)), c(n1));
    assert_eq!(child_regs.rip, c(regs.rip));
    assert_eq!(child_regs.rsp, c(sp));
    assert_eq!(child_regs.fs_base, c(regs.fs_base));
    assert_eq!(child_regs.get(Gpr::Rbx), c(n2));
    assert_eq!(child_regs.get(Gpr::Rax), 0);

    // The child walks its list from the stack variable: each heap page faults once, is
    // copied and relocated, and the child sees its own nodes.
    let mut fault = |addr: u64, child_mem: &mut Memory| {
        let parent_page = (addr - child.base() + parent.base()) & !(PAGE_SIZE - 1);
        let (state, role, has_tags, _) = states[&(parent_page - parent.base())];
        if child_mem.contains_key(&(addr & !(PAGE_SIZE - 1))) {
            return;
        }
        match on_child_fault(state, role, has_tags, Access::Read) {
            OnFault::CopyForChild { relocate } => {
                let mut copy = mem[&parent_page];
                if relocate {
                    relocate_page(&source, &parent, &child, parent_page, &mut copy).unwrap();
                }
                child_tags
                    .set_page_mask(c(parent_page), tags.page_mask(parent_page))
                    .unwrap();
                child_mem.insert(c(parent_page), copy);
            }
            OnFault::Spurious => {
                child_mem.insert(c(parent_page), mem[&parent_page]);
            }
            OnFault::Deliver => panic!("unexpected fault at {addr:#x}"),
        }
    };
    let mut node = word(&child_mem, child_regs.rsp);
    let mut values = Vec::new();
    while node != 0 {
        assert!(
            child.contains(node),
            "the child only ever follows its own pointers"
        );
        fault(node, &mut child_mem);
        values.push(word(&child_mem, node + 8));
        node = word(&child_mem, node);
    }
    assert_eq!(values, [111, 222]);
    // The integer in data is untouched; the parent's memory is unchanged.
    fault(c(plain), &mut child_mem);
    assert_eq!(word(&child_mem, c(plain)), 42);
    assert_eq!(word(&mem, n1), n2);

    // The child exits; the parent reaps it.
    procs.exit(cpid, 3).unwrap();
    match procs.waitpid(ppid, WaitTarget::Any, WaitOptions::default()) {
        Ok(WaitOutcome::Reaped { pid, status }) => {
            assert_eq!(pid, cpid);
            assert_eq!(status.wait_status().exit_status(), Some(3));
        }
        other => panic!("{other:?}"),
    }
}
