//! Named crash points for whitebox crash tests, compiled in only with the `failpoints` cargo
//! feature (without it the engine's calls to a point compile to nothing).
//!
//! `RIPTIDE_CRASH_AT=<name>[@<n>]` in the environment makes the process die the `n`-th time
//! (default: the first) any thread passes the point called `<name>`: it writes
//! `CRASHPOINT <name>` to stdout and calls `abort()` — no unwinding, no destructors, no
//! buffered data written out, like a `kill -9` at that line. Every point is listed in
//! [`POINTS`] so a driver can walk all of them.

/// Whether the crash points are compiled in (the `failpoints` feature); without it
/// `RIPTIDE_CRASH_AT` does nothing, so a driver must refuse to run.
pub const ENABLED: bool = cfg!(feature = "failpoints");

/// Every crash point, in the order of the paths they sit on.
pub const POINTS: &[&str] = &[
    "flush.before_commit",
    "flush.after_commit",
    "compaction.intra_l0.before_commit",
    "compaction.intra_l0.after_commit",
    "compaction.minor.before_commit",
    "compaction.minor.after_commit",
    "compaction.major.before_commit",
    "compaction.major.after_commit",
    "compaction.major_self.before_commit",
    "compaction.major_self.after_commit",
    "compaction.split.before_commit",
    "compaction.split.after_commit",
    "compaction.l2_rewrite.before_commit",
    "compaction.l2_rewrite.after_commit",
    "compaction.minor_range.before_commit",
    "compaction.minor_range.after_commit",
    "compaction.major_range.before_commit",
    "compaction.major_range.after_commit",
    "checkpoint.before_current",
    "checkpoint.after_current",
];

/// Passes the point `scope.name.stage` (`name` may be empty: `scope.stage`).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn hit(_scope: &str, _name: &str, _stage: &str) {}

/// Passes the point `scope.name.stage` (`name` may be empty: `scope.stage`).
#[cfg(feature = "failpoints")]
pub(crate) fn hit(scope: &str, name: &str, stage: &str) {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static PASSES: AtomicU64 = AtomicU64::new(0);
    let Some((target, nth)) = TARGET.get_or_init(|| {
        let v = std::env::var("RIPTIDE_CRASH_AT").ok()?;
        Some(match v.split_once('@') {
            Some((n, k)) => (n.to_string(), k.parse().unwrap_or(1).max(1)),
            None => (v, 1),
        })
    }) else {
        return;
    };
    let point = if name.is_empty() {
        format!("{scope}.{stage}")
    } else {
        format!("{scope}.{name}.{stage}")
    };
    debug_assert!(POINTS.contains(&point.as_str()), "unlisted crash point {point}");
    if point == *target && PASSES.fetch_add(1, Ordering::SeqCst) + 1 == *nth {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "\nCRASHPOINT {point}");
        let _ = out.flush();
        std::process::abort();
    }
}
