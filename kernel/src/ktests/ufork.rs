//! μprocesses: a program forks children that see their own relocated copies of its memory,
//! exit with codes their parent collects with `waitpid`, and leave nothing behind; functions
//! cannot fork, and programs are not invoked as functions.

use crate::ktest;
use crate::ktests::user_programs::{self, Program};
use crate::orchestrator;
use crate::runtime::{self, InvokeFailure};
use crate::ufork;
use alloc::format;
use alloc::string::String;
use fjord_kernel::{kassert, kassert_eq};
use fjord_libos::abi::{Error, Sysno, encode};
use fjord_pd::PdId;

type R<T> = Result<T, String>;

/// Runs `program` to its end, which must be exit code 0, and checks that every μprocess, PD,
/// frame and frame commitment it took came back.
fn runs_and_gives_everything_back(program: &str) -> R<()> {
    kassert!(
        runtime::lookup(program).is_some(),
        "{program} is not deployed"
    );
    crate::module::warm::drain();
    crate::jord::with(|j| j.trim_root_cache());
    let (pds, frames) = (
        crate::jord::with(|j| j.live_pds()),
        crate::mm::frames::free_frames(),
    );
    let (_, ticket) = ufork::spawn(program).map_err(|e| format!("{e:?}"))?;
    let status = ufork::status_of(&orchestrator::wait(ticket).result);
    kassert!(status == Some(0), "{program} ended with {status:?}");
    kassert_eq!(ufork::count(), 0);
    // Ended μprocesses' PDs kept by their programs for the next ones hold page tables:
    // destroy them before counting.
    crate::module::warm::drain();
    kassert_eq!(crate::jord::with(|j| j.live_pds()), pds);
    crate::jord::with(|j| j.trim_root_cache());
    kassert_eq!(crate::mm::frames::free_frames(), frames);
    kassert_eq!(crate::mm::frames::committed_frames(), 0);
    Ok(())
}

fn needs_forktest() -> R<()> {
    kassert!(
        runtime::lookup("forktest").is_some(),
        "forktest is not deployed (boot with modules=initrd)"
    );
    Ok(())
}

ktest! {
    fn forked_children_see_their_own_relocated_memory() {
        needs_forktest()?;
        crate::module::warm::drain();
        let run = || -> R<()> {
            let (pid, ticket) = ufork::spawn("forktest").map_err(|e| format!("{e:?}"))?;
            kassert!(pid > 1);
            let done = orchestrator::wait(ticket);
            kassert_eq!(ufork::status_of(&done.result), Some(0));
            kassert_eq!(ufork::count(), 0);
            Ok(())
        };
        // Destroyed PDs leave their root tables, with the intermediate tables of the addresses
        // they used, in a reuse cache, and programs keep ended μprocesses' PDs for the next
        // ones: empty both before each count.
        run()?;
        crate::module::warm::drain();
        let pds = crate::jord::with(|j| j.live_pds());
        crate::jord::with(|j| j.trim_root_cache());
        let frames = crate::mm::frames::free_frames();
        for _ in 0..2 {
            run()?;
        }
        crate::module::warm::drain();
        kassert_eq!(crate::jord::with(|j| j.live_pds()), pds);
        crate::jord::with(|j| j.trim_root_cache());
        kassert_eq!(crate::mm::frames::free_frames(), frames);
        kassert_eq!(crate::mm::frames::committed_frames(), 0);
        Ok(())
    }
}

ktest! {
    slow fn forktest_passes_in_every_copy_mode_and_cow_needs_groundhog_mode_off() {
        needs_forktest()?;
        use fjord_ufork::copy_mode::{CopyMode, IsolationLevel};
        for mode in [CopyMode::Full, CopyMode::CopyOnAccess, CopyMode::CopyOnPointerAccess] {
            let options = ufork::SpawnOptions { mode, isolation: IsolationLevel::Full };
            let (_, ticket) = ufork::spawn_with("forktest", options).map_err(|e| format!("{e:?}"))?;
            let done = orchestrator::wait(ticket);
            let status = ufork::status_of(&done.result);
            kassert!(status == Some(0), "forktest in {mode:?}: exit status {status:?}");
        }
        // Lazy forks copied pages on access, and children of the copa run read pages without
        // pointers (strings, numbers) from their parent's frames, and kept those frames when
        // their parent wrote the pages (`shared_pages_stay_apart`); pages holding pointers
        // their parent wrote first reached them unrelocated, relocated on their first access
        // (`later_writes_stay_apart`). Children discarded pages they still shared or lacked
        // (`discard`), and frames went back.
        let lazy = ufork::lazy::stats();
        kassert!(
            lazy.pages_copied > 0
                && lazy.pages_shared > 0
                && lazy.frames_given > 0
                && lazy.pages_staged > 0
                && lazy.pages_discarded > 0,
            "{lazy:?}"
        );
        kassert!(ufork::pages_discarded() > 0);
        for isolation in [IsolationLevel::Full, IsolationLevel::NonAdversarial] {
            let options = ufork::SpawnOptions { mode: CopyMode::CopyOnWrite, isolation };
            kassert_eq!(
                ufork::spawn_with("forktest", options).err(),
                Some(ufork::SpawnError::CowNeedsIsolationOff)
            );
        }
        kassert_eq!(ufork::count(), 0);
        Ok(())
    }
}

ktest! {
    fn running_out_of_memory_mid_fork_leaves_the_parent_intact_and_frees_the_child() {
        runs_and_gives_everything_back("forkoom")
    }
}

ktest! {
    fn with_groundhog_mode_off_copy_on_write_spawn_and_pipes_work() {
        kassert!(runtime::lookup("forkhello").is_some(), "forkhello is not deployed");
        use fjord_ufork::copy_mode::{CopyMode, IsolationLevel};
        // forkhello forks in every mode (copy-on-write included, allowed with isolation off),
        // spawns `nop`, and passes bytes back and forth with a child through two pipes.
        let options = ufork::SpawnOptions { mode: CopyMode::CopyOnWrite, isolation: IsolationLevel::None };
        let (_, ticket) = ufork::spawn_with("forkhello", options).map_err(|e| format!("{e:?}"))?;
        let done = orchestrator::wait(ticket);
        let status = ufork::status_of(&done.result);
        kassert!(status == Some(0), "forkhello ended with {status:?}");
        kassert_eq!(ufork::count(), 0);
        Ok(())
    }
}

ktest! {
    fn functions_cannot_fork_and_programs_are_not_functions() {
        needs_forktest()?;
        let p = crate::jord::with(|j| j.cget(PdId::KERNEL)).map_err(|e| format!("{e:?}"))?;
        let entry = user_programs::entry(Program::Syscall4);
        let deadline = crate::arch::time::deadline_after_ms(1000);
        for no in [Sysno::Fork, Sysno::Waitpid, Sysno::Getpid] {
            let r = crate::jord::exec::call(p, entry, [no as u64, 0, 0, 0], Some(deadline));
            kassert_eq!(r, Ok(encode(Err(Error::NoSys))));
        }
        if let Ok(f) = crate::jord::with(|j| j.cput(PdId::KERNEL, p)) {
            f.finish();
        }
        kassert_eq!(runtime::invoke("forktest", b""), Err(InvokeFailure::NotAFunction));
        kassert_eq!(ufork::spawn("hello").err(), Some(ufork::SpawnError::NotAProgram));
        kassert_eq!(ufork::spawn("nope").err(), Some(ufork::SpawnError::NoSuchProgram));
        Ok(())
    }
}

ktest! {
    slow fn every_tag_source_forks_and_counts_what_it_relocated() {
        needs_forktest()?;
        use crate::ufork::tags;
        use fjord_ufork::copy_mode::{CopyMode, IsolationLevel};
        use fjord_ufork::source::TagChoice;
        let was = tags::choice();
        let run = |program: &str, choice: TagChoice| -> R<Option<u8>> {
            tags::set_choice(choice);
            let options = ufork::SpawnOptions { mode: CopyMode::Full, isolation: IsolationLevel::Full };
            let (_, ticket) = ufork::spawn_with(program, options).map_err(|e| format!("{e:?}"))?;
            let status = ufork::status_of(&orchestrator::wait(ticket).result);
            tags::set_choice(was);
            Ok(status)
        };
        // Inference alone finds every pointer forktest's children use (its heap ends inside
        // its area, so no one-past-the-end pointer needs the shadow table).
        let before = tags::words_relocated();
        kassert_eq!(run("forktest", TagChoice::Inferred)?, Some(0));
        let after = tags::words_relocated();
        kassert!(after.inferred > before.inferred, "{before:?} {after:?}");
        kassert_eq!((after.precise, after.both), (before.precise, before.both));
        // The union finds the same, and says which source found each word.
        let before = tags::words_relocated();
        kassert_eq!(run("forktest", TagChoice::Both)?, Some(0));
        let after = tags::words_relocated();
        kassert!(after.both > before.both && after.inferred > before.inferred, "{after:?}");
        // The shadow table alone (the loader's pointers: GOT, statics; the heap header) and the
        // registers the kernel knows: forkhello's children need no other.
        let before = tags::words_relocated();
        kassert_eq!(run("forkhello", TagChoice::Precise)?, Some(0));
        let after = tags::words_relocated();
        kassert!(after.precise > before.precise, "{before:?} {after:?}");
        kassert_eq!((after.inferred, after.both), (before.inferred, before.both));
        kassert_eq!(ufork::count(), 0);
        Ok(())
    }
}

ktest! {
    fn precise_tags_alone_carry_a_child_back_through_the_frames_of_its_fork() {
        kassert!(runtime::lookup("forkframes").is_some(), "forkframes is not deployed");
        use crate::ufork::tags;
        use fjord_ufork::copy_mode::{CopyMode, IsolationLevel};
        use fjord_ufork::source::TagChoice;
        // The child returns through twelve frames whose return addresses and saved frame
        // pointers only the frame-pointer chain tags (no inference): unrelocated, they point
        // into the parent's area and the child faults.
        let was = tags::choice();
        tags::set_choice(TagChoice::Precise);
        let mut result = Ok(());
        for mode in [CopyMode::Full, CopyMode::CopyOnAccess, CopyMode::CopyOnPointerAccess] {
            let options = ufork::SpawnOptions { mode, isolation: IsolationLevel::Full };
            let status = match ufork::spawn_with("forkframes", options) {
                Ok((_, ticket)) => ufork::status_of(&orchestrator::wait(ticket).result),
                Err(e) => {
                    result = Err(format!("{e:?}"));
                    break;
                }
            };
            if status != Some(0) {
                result = Err(format!("forkframes in {mode:?} under precise tags: {status:?}"));
                break;
            }
        }
        tags::set_choice(was);
        result?;
        kassert_eq!(ufork::count(), 0);
        Ok(())
    }
}

ktest! {
    fn a_fork_bomb_stops_at_its_programs_bound_and_another_program_still_starts() {
        for p in ["forkbomb", "sleeper"] {
            kassert!(runtime::lookup(p).is_some(), "{p} is not deployed");
        }
        let of = |program: &str| ufork::list().into_iter().filter(|p| p.program == program).count();
        let (bomb, bomb_ticket) = ufork::spawn("forkbomb").map_err(|e| format!("{e:?}"))?;
        let bound = usize::from(fjord_faas::module::manifest::DEFAULT_MAX_PROCESSES);
        // The bomb holds its bound (itself and 63 sleeping children) and sleeps.
        let deadline = crate::arch::time::deadline_after_ms(60_000);
        let held = orchestrator::wait_until(
            || {
                ufork::list()
                    .iter()
                    .any(|p| p.pid == bomb && p.state == "blocked" && of("forkbomb") == bound)
            },
            deadline,
        );
        kassert!(held, "forkbomb holds {} μprocesses, not {bound}", of("forkbomb"));
        kassert!(ufork::count() < ufork::MAX_PROCESSES);
        // Its program may start no more; another program starts, and may not kill the bomb's.
        kassert_eq!(
            ufork::spawn("forkbomb").err(),
            Some(ufork::SpawnError::ProgramLimit(bound as u16))
        );
        let (sleeper, sleeper_ticket) = ufork::spawn("sleeper").map_err(|e| format!("{e:?}"))?;
        kassert_eq!(ufork::kill_as(sleeper, bomb, 9), Err(Error::AccessDenied));
        kassert_eq!(ufork::kill_as(bomb, sleeper, 9), Err(Error::AccessDenied));
        // Within its own tree, the bomb's children may signal it (signal 0: a check only).
        let child = ufork::list()
            .into_iter()
            .find(|p| p.program == "forkbomb" && p.ppid == bomb)
            .ok_or("no child of the bomb")?;
        kassert_eq!(ufork::kill_as(child.pid, bomb, 0), Ok(0));
        // The operator ends them all; every μprocess is gone and reaped.
        kassert!(ufork::kill_pid(sleeper));
        kassert!(ufork::kill_pid(bomb));
        let _ = orchestrator::wait(sleeper_ticket);
        let _ = orchestrator::wait(bomb_ticket);
        for p in ufork::list() {
            ufork::kill_pid(p.pid);
        }
        let gone = orchestrator::wait_until(|| ufork::count() == 0, crate::arch::time::deadline_after_ms(60_000));
        kassert!(gone, "{} μprocesses left", ufork::count());
        Ok(())
    }
}

ktest! {
    slow fn full_isolation_copies_system_call_buffers_and_lesser_levels_do_not() {
        kassert!(runtime::lookup("forkhello").is_some(), "forkhello is not deployed");
        use fjord_ufork::copy_mode::{CopyMode, IsolationLevel};
        // forkhello passes bytes back and forth through two pipes (read, write, pipe).
        let run = |isolation| -> R<u64> {
            let before = ufork::files::bytes_copied();
            let in_call = ufork::in_call::writes();
            let options = ufork::SpawnOptions { mode: CopyMode::CopyOnPointerAccess, isolation };
            let (_, ticket) = ufork::spawn_with("forkhello", options).map_err(|e| format!("{e:?}"))?;
            let status = ufork::status_of(&orchestrator::wait(ticket).result);
            kassert!(status == Some(0), "forkhello at {isolation:?} ended with {status:?}");
            // Its writes to pipes with room completed inside the call, at every level.
            let in_call = ufork::in_call::writes() - in_call;
            kassert!(in_call >= 2 * 201, "{in_call} writes completed in the call at {isolation:?}");
            Ok(ufork::files::bytes_copied() - before)
        };
        let full = run(IsolationLevel::Full)?;
        // 201 one-byte round trips each way, at least, went through kernel buffers.
        kassert!(full >= 2 * 201, "{full} bytes copied at full isolation");
        kassert_eq!(run(IsolationLevel::NonAdversarial)?, 0);
        kassert_eq!(run(IsolationLevel::None)?, 0);
        Ok(())
    }
}

ktest! {
    slow fn forks_of_megabytes_across_many_page_tables_keep_each_copy_apart_and_free_everything() {
        // A lazy fork of a large area drops the parent's level-1 tables instead of clearing
        // its leaves one by one; the parent's and the children's later accesses rebuild them.
        runs_and_gives_everything_back("forkbig")
    }
}

ktest! {
    fn a_programs_thread_local_storage_is_its_own_in_each_uprocess() {
        kassert!(runtime::lookup("tlstest").is_some(), "tlstest is not deployed");
        // tlstest reads its `.tdata` and `.tbss` through `fs` at the linker's `@tpoff` offsets,
        // forks, and checks that the child starts with its values and then has its own.
        for mode in [fjord_ufork::copy_mode::CopyMode::Full, fjord_ufork::copy_mode::CopyMode::CopyOnPointerAccess] {
            let options = ufork::SpawnOptions { mode, ..ufork::SpawnOptions::default() };
            let (_, ticket) = ufork::spawn_with("tlstest", options).map_err(|e| format!("{e:?}"))?;
            let status = ufork::status_of(&orchestrator::wait(ticket).result);
            kassert!(status == Some(0), "tlstest in {mode:?} ended with {status:?}");
        }
        Ok(())
    }
}

ktest! {
    fn a_program_keeps_ended_uprocesses_pds_for_its_next_ones_holding_no_area_memory() {
        needs_forktest()?;
        crate::module::warm::drain();
        let stats = || (crate::jord::with(|j| j.stats.areas_emptied), ufork::pds_reused());
        let skipped = || crate::jord::with(|j| j.stats.scrubs_skipped);
        let (emptied, reused) = stats();
        let scrubs_skipped = skipped();
        let dispatch = orchestrator::stats();
        let handoffs = ufork::handoffs();
        let (_, ticket) = ufork::spawn("forktest").map_err(|e| format!("{e:?}"))?;
        kassert_eq!(ufork::status_of(&orchestrator::wait(ticket).result), Some(0));
        // Children start on their parent's executor when JBSQ admits them there, and a parent
        // that waits for the child it just forked runs it at once.
        kassert!(orchestrator::stats().local_submits > dispatch.local_submits);
        kassert!(ufork::handoffs() > handoffs);
        let (emptied_now, reused_now) = stats();
        // forktest forks dozens of children one after another (and checks that none sees an
        // ended sibling's memory): most take an ended one's PD.
        let (emptied, reused) = (emptied_now - emptied, reused_now - reused);
        kassert!(reused >= 10 && reused <= emptied, "{reused} PDs reused, {emptied} emptied");
        // A reused PD that gained no right since its last emptying is not scrubbed again.
        kassert!(skipped() > scrubs_skipped);
        let f = runtime::lookup("forktest").ok_or("forktest went")?;
        let spares = f.warm.idle();
        kassert!((1..=crate::module::pool::SPARES_PER_PROGRAM).contains(&spares));
        // A spare holds its page tables, and no frame of its area nor any commitment.
        kassert_eq!(crate::mm::frames::committed_frames(), 0);
        let frames = crate::mm::frames::free_frames();
        crate::module::warm::drain();
        kassert_eq!(f.warm.idle(), 0);
        let freed = crate::mm::frames::free_frames() - frames;
        kassert!(freed <= 8 * spares, "{spares} spares held {freed} frames");
        Ok(())
    }
}
