//! The virtio-blk disk: sectors written, flushed and read back; bad requests refused with a
//! clear error. xtask attaches a disk to every test boot; the test leaves the sectors it uses
//! as it found them (a manual `cargo xtask run --append mode=test` boots with the user's image).

use crate::drivers::virtio_blk::{self, DiskError, SECTOR};
use crate::ktest;
use alloc::format;
use alloc::vec;
use fjord_kernel::{kassert, kassert_eq};

ktest! {
    fn sectors_written_and_flushed_read_back_and_bad_requests_are_refused() {
        let sectors = virtio_blk::with(|d| Ok(d.sectors())).map_err(|e| format!("{e:?}"))?;
        kassert!(sectors >= 2048, "a disk of {sectors} sectors");
        // The last 16 sectors: saved, overwritten with a pattern per sector, restored.
        let first = sectors - 16;
        let mut saved = vec![0u8; 16 * SECTOR];
        virtio_blk::with(|d| d.read(first, &mut saved)).map_err(|e| format!("{e:?}"))?;
        let pattern: alloc::vec::Vec<u8> =
            (0..16 * SECTOR).map(|i| (i / SECTOR * 31 + i % 251) as u8).collect();
        let mut back = vec![0u8; 16 * SECTOR];
        let outcome = virtio_blk::with(|d| {
            d.write(first, &pattern)?;
            d.flush()?;
            d.read(first, &mut back)
        });
        let restored = virtio_blk::with(|d| {
            d.write(first, &saved)?;
            d.flush()
        });
        outcome.map_err(|e| format!("{e:?}"))?;
        restored.map_err(|e| format!("{e:?}"))?;
        kassert!(back == pattern, "the sectors read back differ from those written");
        // One sector in the middle of the run, read alone.
        let mut one = vec![0u8; SECTOR];
        virtio_blk::with(|d| d.read(first + 5, &mut one)).map_err(|e| format!("{e:?}"))?;
        kassert!(one == saved[5 * SECTOR..6 * SECTOR], "the restored sector differs");
        // Bad requests: beyond the end, not whole sectors, nothing.
        let mut two = vec![0u8; 2 * SECTOR];
        kassert_eq!(virtio_blk::with(|d| d.read(sectors - 1, &mut two)), Err(DiskError::OutOfRange));
        kassert_eq!(virtio_blk::with(|d| d.read(u64::MAX, &mut one)), Err(DiskError::OutOfRange));
        kassert_eq!(virtio_blk::with(|d| d.write(0, &two[..100])), Err(DiskError::NotSectors));
        kassert_eq!(virtio_blk::with(|d| d.read(0, &mut [])), Err(DiskError::NotSectors));
        Ok(())
    }
}

ktest! {
    fn a_program_writes_saves_renames_shares_and_removes_its_disk_files() {
        use crate::ufork;
        kassert!(crate::runtime::lookup("filetest").is_some(), "filetest is not deployed");
        let (_, ticket) = ufork::spawn("filetest").map_err(|e| format!("{e:?}"))?;
        let status = ufork::status_of(&crate::orchestrator::wait(ticket).result);
        kassert!(status == Some(0), "filetest ended with {status:?}");
        // What it left, in its own namespace, and nothing else of its.
        let files = crate::fs::list().map_err(|e| format!("{e:?}"))?;
        let mine: alloc::vec::Vec<_> =
            files.iter().filter(|(n, _)| n.starts_with("filetest/")).collect();
        kassert!(mine.len() == 1, "{files:?}");
        kassert_eq!(mine[0].0.as_str(), "filetest/dump.dat");
        kassert_eq!(mine[0].1, 100_000);
        let data = crate::fs::read("filetest/dump.dat").map_err(|e| format!("{e:?}"))?;
        kassert!(
            data.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8 ^ 2),
            "dump.dat holds the second save"
        );
        // A scratch disk keeps it for the host to read; the user's disk gets it back clean.
        if !crate::boot::options().scratch_disk {
            crate::fs::remove("filetest/dump.dat").map_err(|e| format!("{e:?}"))?;
        }
        Ok(())
    }
}
