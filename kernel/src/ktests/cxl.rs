//! The emulated CXL memory as the kernel maps it: a checkpoint written, listed, read back and
//! retired through the ivshmem mapping, its pages at the guest-physical addresses every node
//! uses. xtask attaches a scratch region to the q35 test boots; microvm has no PCI, so there
//! the test says it was not run.

use crate::ktest;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use fjord_cxl::Kind;
use fjord_kernel::layout::{CXL_BASE, CXL_PHYS};
use fjord_kernel::{kassert, kassert_eq};

fn page(i: u64) -> Vec<u8> {
    (0..4096).map(|j| (i as usize * 13 + j * 7) as u8).collect()
}

ktest! {
    fn a_checkpoint_round_trips_through_the_mapped_region_and_gives_its_pages_back() {
        let Some(c) = crate::cxl::get() else {
            return Err(String::from("not run: no ivshmem device on this board (the q35 boots have one)"));
        };
        let e = |e: fjord_cxl::CxlError| format!("{e:?}");
        let r = &c.region;
        let free = r.free_pages();
        let mut w = r.begin("ktest-cxl", 7, Kind::Function, c.node).map_err(e)?;
        for i in 0..3 {
            w.push_page(&page(i)).map_err(e)?;
        }
        w.write_image(b"layout, registers and tags").map_err(e)?;
        let cid = w.publish().map_err(e)?;
        let listed = r.list();
        kassert!(
            listed.iter().any(|cp| cp.cid == cid && cp.name == "ktest-cxl" && cp.pages == 3),
            "{listed:?}"
        );
        let reader = r.open(cid, c.node).map_err(e)?;
        for i in 0..3 {
            let mut buf = vec![0u8; 4096];
            reader.page(i, &mut buf).map_err(e)?;
            kassert!(buf == page(i), "page {i} differs");
            // Where a clone would map it from: the same physical page on every node.
            let offset = reader.page_offset(i).ok_or("no offset")?;
            let t = crate::mm::kernel_tables::kernel()
                .translate(CXL_BASE + offset)
                .ok_or("the page is not mapped")?;
            kassert_eq!(t.phys, CXL_PHYS + offset);
            // Write-back (neither uncached nor write-through), not executable.
            let uncached = fjord_kernel::paging::Flags::NO_CACHE.0 | fjord_kernel::paging::Flags::WRITE_THROUGH.0;
            kassert_eq!(t.flags.0 & uncached, 0);
            kassert!(t.flags.0 & fjord_kernel::paging::Flags::NO_EXECUTE.0 != 0);
        }
        kassert_eq!(reader.image(), b"layout, registers and tags");
        reader.close();
        r.retire(cid, c.node).map_err(e)?;
        let _ = r.gc(c.node, |_| true);
        kassert!(r.list().iter().all(|cp| cp.cid != cid));
        kassert_eq!(r.free_pages(), free);
        Ok(())
    }
}

ktest! {
    fn a_function_checkpoint_clones_anywhere_with_the_answers_of_its_zygote() {
        use crate::cxl::clone::{PAGES_COPIED, Tiering, WORDS_RELOCATED};
        use crate::cxl::porter::{Forced, force};
        use core::sync::atomic::Ordering::Relaxed;
        if crate::cxl::get().is_none() {
            return Err(String::from("not run: no ivshmem device on this board (the q35 boots have one)"));
        }
        let Some(f) = crate::runtime::lookup("index") else {
            return Err(String::from("not run: no `index` function (modules=initrd)"));
        };
        let ask = |req: &[u8]| {
            crate::runtime::invoke("index", req).map_err(|e| format!("{e}"))
        };
        let run = || -> Result<(), String> {
            force(Some(Forced::LocalFork));
            let want = (ask(b"get 4321")?, ask(b"sum")?);
            let w = crate::cxl::checkpoint::checkpoint_function("index")
                .map_err(|e| format!("{e:?}"))?;
            // The zygote holds the checkpoint's address: the clone lies elsewhere, relocated.
            for t in [Tiering::MigrateOnWrite, Tiering::MigrateOnAccess, Tiering::Hybrid] {
                force(Some(Forced::Restore(w.cid, t)));
                let copied = PAGES_COPIED.load(Relaxed);
                let got = (ask(b"get 4321")?, ask(b"sum")?);
                kassert!(got == want, "{t:?}: {got:?}, want {want:?}");
                kassert!(PAGES_COPIED.load(Relaxed) - copied >= w.pages, "{t:?}: sum copied too little");
            }
            // No zygote: the clone at the checkpoint's own address, mapping what it only reads.
            crate::ufork::drop_zygote(&f);
            force(Some(Forced::Restore(w.cid, Tiering::MigrateOnWrite)));
            let copied = PAGES_COPIED.load(Relaxed);
            kassert!(ask(b"sum")? == want.1, "same address: sum differs");
            let same = PAGES_COPIED.load(Relaxed) - copied;
            kassert!(same < 4, "a clone at its checkpoint's address copied {same} pages for reads");
            // Hybrid: what earlier hybrid clones of the checkpoint accessed here (every page:
            // one summed) is copied on first access, not mapped in place.
            let learned = crate::cxl::clone::accessed_by_clones(w.cid) as u64;
            kassert!(learned >= w.pages, "clones accessed {learned} of {} pages", w.pages);
            force(Some(Forced::Restore(w.cid, Tiering::Hybrid)));
            let copied = PAGES_COPIED.load(Relaxed);
            kassert!(ask(b"sum")? == want.1, "hybrid: sum differs");
            let hybrid = PAGES_COPIED.load(Relaxed) - copied;
            kassert!(hybrid >= w.pages, "a hybrid clone copied {hybrid} of {} learned pages", w.pages);
            force(Some(Forced::FullCopy(w.cid)));
            kassert!(ask(b"get 4321")? == want.0, "full copy: get differs");
            // The module deployed again (the same bytes): its code lies elsewhere now, and
            // clones move the pointers into it (a clone at the same code address moves none).
            let file = crate::module::module_file("index").ok_or("no module file for index")?;
            crate::module::deploy("index", &file).map_err(|e| format!("{e:?}"))?;
            let g = crate::runtime::lookup("index").ok_or("index gone")?;
            kassert!(g.image.base != f.image.base, "the code did not move: {:#x}", g.image.base);
            let relocated = WORDS_RELOCATED.load(Relaxed);
            for t in [Tiering::MigrateOnWrite, Tiering::MigrateOnAccess, Tiering::Hybrid] {
                force(Some(Forced::Restore(w.cid, t)));
                let got = (ask(b"get 4321")?, ask(b"sum")?);
                kassert!(got == want, "code moved, {t:?}: {got:?}, want {want:?}");
            }
            let moved = WORDS_RELOCATED.load(Relaxed) - relocated;
            kassert!(moved > 0, "no word moved with the code");
            force(None);
            let listed = crate::cxl::clone::per_clone();
            kassert!(listed.is_empty(), "clones whose requests ended still listed: {listed:?}");
            kassert!(crate::cxl::checkpoint::retire(w.cid), "not retired");
            Ok(())
        };
        let r = run();
        force(None);
        r
    }
}

ktest! {
    fn a_warm_functions_checkpoint_makes_instances_past_init_here_or_elsewhere() {
        use crate::cxl::checkpoint::{RESTORED, checkpoint_function, restore_warm};
        use crate::cxl::clone::{Tiering, WORDS_RELOCATED};
        use crate::cxl::porter::{Forced, force};
        use core::sync::atomic::Ordering::Relaxed;
        use fjord_groundhog::GroundhogMode;
        use fjord_pd::PdId;
        if crate::cxl::get().is_none() {
            return Err(String::from("not run: no ivshmem device on this board (the q35 boots have one)"));
        }
        let Some(file) = crate::module::module_file("index") else {
            return Err(String::from("not run: no `index` function (modules=initrd)"));
        };
        let ask = |req: &[u8]| {
            crate::runtime::invoke("index", req).map_err(|e| format!("{e}"))
        };
        let run = || -> Result<(), String> {
            // `index` as a warm pool with Groundhog's restore (its manifest says fork).
            crate::module::deploy_with("index", &file, Some(GroundhogMode::Restore))
                .map_err(|e| format!("{e:?}"))?;
            let f = crate::runtime::lookup("index").ok_or("index gone")?;
            force(Some(Forced::ColdStart));
            let want = (ask(b"get 4321")?, ask(b"sum")?);
            let w = checkpoint_function("index").map_err(|e| format!("{e:?}"))?;
            // No idle instance: the next request's is restored past its init.
            f.warm.drain();
            force(Some(Forced::Restore(w.cid, Tiering::MigrateOnWrite)));
            let restored = RESTORED.load(Relaxed);
            let got = (ask(b"get 4321")?, ask(b"sum")?);
            kassert!(got == want, "restored here: {got:?}, want {want:?}");
            kassert!(RESTORED.load(Relaxed) > restored, "no instance was restored");
            // Its slot taken (a kernel VMA there): restored elsewhere, its pointers relocated.
            f.warm.drain();
            let probe = restore_warm(&f, w.cid).map_err(|e| format!("{e:?}"))?;
            let (base, len) = probe.vma(&f);
            crate::module::instance::destroy(probe.pd);
            let blocker = crate::jord::with(|j| j.mmap_area(PdId::KERNEL, len, Some(base), false))
                .map_err(|e| format!("blocking {base:#x}: {e:?}"))?;
            let unblock = || {
                crate::jord::settled(|j| match j.munmap(PdId::KERNEL, blocker, len) {
                    Ok(p) => (Some(p), Ok(())),
                    Err(e) => (None, Err(e)),
                })
                .map_err(|e| format!("unblocking {blocker:#x}: {e:?}"))
            };
            if blocker != base {
                unblock()?;
                return Err(format!("{base:#x} was not free to block"));
            }
            let relocated = WORDS_RELOCATED.load(Relaxed);
            let got = (ask(b"get 4321")?, ask(b"sum")?);
            let moved = WORDS_RELOCATED.load(Relaxed) - relocated;
            unblock()?;
            kassert!(got == want, "restored elsewhere: {got:?}, want {want:?}");
            kassert!(moved > 0, "restored elsewhere, no word relocated");
            // Programs are checkpointed by μprocess.
            kassert!(
                checkpoint_function("ticker") == Err(crate::cxl::checkpoint::CheckpointError::NotAFunction),
                "a program's function checkpoint"
            );
            kassert!(crate::cxl::checkpoint::retire(w.cid), "not retired");
            Ok(())
        };
        let r = run();
        force(None);
        if let Some(f) = crate::runtime::lookup("index") {
            f.warm.drain();
        }
        crate::module::deploy("index", &file).map_err(|e| format!("{e:?}"))?;
        r
    }
}
