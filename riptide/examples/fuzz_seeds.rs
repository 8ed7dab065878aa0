//! Writes the seed corpus of every fuzz target (`riptide::fuzzing::corpus`: valid images built
//! by the engine's own writers) into `<dir>/<target>/seed-NNN`, for `scripts/fuzz.sh`.
//!
//! `cargo run -p riptide --features fuzzing --example fuzz_seeds -- fuzz/corpus`

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: fuzz_seeds DIR")?);
    let mut counts = std::collections::BTreeMap::new();
    for (target, data) in riptide::fuzzing::corpus()? {
        let n = counts.entry(target).or_insert(0u32);
        let d = dir.join(target);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join(format!("seed-{n:03}")), data)?;
        *n += 1;
    }
    for (target, n) in counts {
        println!("{target}: {n} seeds");
    }
    Ok(())
}
