//! The blackbox crash mode (`--crash_rounds`): [`crash_driver`] runs the workload in a child
//! process ([`child_command`]), kills it with SIGKILL after a random time, and repeats; every
//! child verifies what it recovered before it writes more, and a last run verifies at the end.
//!
//! Invariant: the children get the parent's workload flags (and `--reuse`), so each reopens the
//! same database and expected state that the one before it left.

use super::args::StressArgs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::time::{Duration, Instant};

/// A child `riptide stress` run of the workload of `a` on `db` (`--child`: it verifies on start
/// and skips the drivers), with its own seed and duration; the caller adds the rest.
pub(crate) fn child_command(exe: &Path, a: &StressArgs, db: &Path, seed: u64, duration: u64) -> std::process::Command {
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("stress")
        .arg(format!("--db={}", db.display()))
        .arg(format!("--duration={duration}"))
        .arg(format!("--threads={}", a.threads))
        .arg(format!("--tables={}", a.tables))
        .arg(format!("--keys={}", a.keys))
        .arg(format!("--value_min={}", a.value_min))
        .arg(format!("--value_max={}", a.value_max))
        .arg(format!("--mix={}", a.mix))
        .arg(format!("--seed={seed}"))
        .arg(format!("--sync={}", a.sync))
        .arg(format!("--row_cache_size={}", a.row_cache_size))
        .arg(format!("--block_cache_size={}", a.block_cache_size))
        .arg("--child")
        .args(a.objects.to_args());
    if a.reuse {
        cmd.arg("--reuse");
    }
    cmd
}

/// The blackbox crash loop: runs the workload in a child, kills it after a random time,
/// repeats; each child verifies the recovered state first. A last run verifies at the end.
pub(super) fn crash_driver(a: &StressArgs, seed: u64) -> Result<bool, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rng = StdRng::seed_from_u64(seed);
    println!(
        "riptide stress: crash mode, seed {seed}, {} rounds, kill after {}..{} ms",
        a.crash_rounds, a.kill_min_ms, a.kill_max_ms
    );
    let (mut killed, mut resolved, mut verified_rounds) = (0, 0u64, 0u64);
    for round in 0..=a.crash_rounds {
        let last = round == a.crash_rounds;
        let child_seed: u64 = rng.random();
        let mut cmd = child_command(&exe, a, &a.db, child_seed, if last { 1 } else { a.duration });
        cmd.arg(format!("--small={}", a.small))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| format!("starting the child: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        let verified = |lines: &[String]| lines.iter().any(|l| l.starts_with("VERIFIED "));
        let status = if last {
            child.wait().map_err(|e| e.to_string())?
        } else {
            let kill_at = Duration::from_millis(rng.random_range(a.kill_min_ms..=a.kill_max_ms.max(a.kill_min_ms)));
            let start = Instant::now();
            loop {
                if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                    break st;
                }
                if start.elapsed() >= kill_at {
                    let _ = child.kill();
                    break child.wait().map_err(|e| e.to_string())?;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let lines = reader.join().unwrap_or_default();
        resolved += lines
            .iter()
            .filter_map(|l| l.split(" keys (").nth(1)?.split(' ').next()?.parse::<u64>().ok())
            .sum::<u64>();
        verified_rounds += u64::from(verified(&lines));
        use std::os::unix::process::ExitStatusExt;
        if status.signal() == Some(libc::SIGKILL) {
            killed += 1;
        } else if !status.success() {
            eprintln!(
                "riptide stress: round {round} failed (seed {seed}, child seed {child_seed}, {status}); its output:\n{}",
                lines.join("\n")
            );
            return Ok(false);
        }
        if last && !(verified(&lines) && lines.iter().any(|l| l.starts_with("DONE "))) {
            return Err(format!("the final run did not verify: {}", lines.join("\n")));
        }
    }
    println!(
        "DONE {} rounds ({killed} killed by SIGKILL while running); {verified_rounds} recoveries verified, \
         {resolved} in-flight writes resolved",
        a.crash_rounds
    );
    Ok(true)
}
