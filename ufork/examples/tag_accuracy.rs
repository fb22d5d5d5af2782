//! Prints, for each emulated tag source, what it relocates of every pattern of word real
//! programs hold: false positives (non-pointers relocated) and false negatives (pointers left),
//! for a μprocess area placed as the kernel places them (clear of the 4 GiB edges and of the
//! ASCII band) and, for comparison, one at an edge and one in the band.
//!
//! `cargo run -p fjord-ufork --example tag_accuracy [words per pattern] [seed]`

use fjord_ufork::Area;
use fjord_ufork::accuracy::{Pattern, measure_many};
use fjord_ufork::source::{Emulated, TagChoice};

fn main() {
    let mut args = std::env::args().skip(1);
    let per_pattern: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let class = 0x1000_0000_0000u64 + (8 << 39);
    let placements = [
        (
            "clear of the 4 GiB edges and of the ASCII band (as placed)",
            class + (9 << 28),
        ),
        ("at a 4 GiB edge (not placed so)", class + (3 << 32)),
        ("in the ASCII band (not placed so)", class + 0x3930_0000),
    ];
    for (placement, base) in placements {
        let area = Area::new(base, 1 << 20).expect("a 1 MiB area");
        println!(
            "\n1 MiB area at {base:#x}, {placement}; {per_pattern} words per pattern, seed {seed}\n"
        );
        println!("| pattern | pointer | precise | inferred | both |");
        println!("|---|---|---:|---:|---:|");
        let results: Vec<_> = TagChoice::ALL
            .iter()
            .map(|&c| measure_many(area, per_pattern, seed, |t| Emulated::new(c, t.clone())))
            .collect();
        for (i, p) in Pattern::ALL.iter().enumerate() {
            let cells: Vec<String> = results
                .iter()
                .map(|rows| {
                    let r = rows[i];
                    if p.is_pointer() {
                        format!("{} missed", r.false_negatives())
                    } else {
                        format!("{} relocated", r.false_positives())
                    }
                })
                .collect();
            println!(
                "| {} | {} | {} |",
                p.name(),
                if p.is_pointer() { "yes" } else { "no" },
                cells.join(" | ")
            );
        }
    }
}
