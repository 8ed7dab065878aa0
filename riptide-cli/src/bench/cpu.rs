//! The process's CPU use over a benchmark, as a share of the machine's cores.
//!
//! [`sample`] reads the process's user and system time (all its threads, the engine's background
//! flushes and compactions included) from `/proc/self/stat`, in clock ticks
//! (`sysconf(_SC_CLK_TCK)`), and the wall clock. [`Sample::share_since`] turns two samples into a
//! [`CpuShare`]: the cores kept busy on average and the user, system and idle shares of the cores
//! the process may run on (`std::thread::available_parallelism`, which honours CPU affinity and
//! cgroup quotas); idle = 100 % minus the process's share. [`line`] prints it as
//! `name : cpu 1.84 of 2 cores busy (user 71.2 %, system 20.8 %, idle 8.0 % of the machine)`,
//! a line no db_bench parser takes for a result (its fourth word is not `micros/op`).
//!
//! Linux only: elsewhere, or when `/proc` cannot be read, [`sample`] returns `None` and the
//! benchmark prints no CPU line (it never fails for want of one).

use std::time::Instant;

/// The process's CPU time and the wall clock at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// User time, clock ticks.
    user_ticks: u64,
    /// System time, clock ticks.
    system_ticks: u64,
    /// Clock ticks per second.
    ticks_per_sec: u64,
    at: Instant,
}

/// CPU use over an interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuShare {
    /// Cores the process may run on.
    pub cores: usize,
    /// Cores kept busy on average: (user + system time) / wall time, at most `cores`.
    pub busy_cores: f64,
    /// User time as a percentage of `cores` x wall time.
    pub user_pct: f64,
    /// System time as a percentage of `cores` x wall time.
    pub system_pct: f64,
    /// 100 - user - system, at least 0.
    pub idle_pct: f64,
}

/// `(utime, stime)` in clock ticks from a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces and parentheses itself, so the fields are counted from
/// the last `)`: state is the first after it, utime the 12th, stime the 13th (fields 14, 15).
pub fn parse_stat(line: &str) -> Option<(u64, u64)> {
    let rest = &line[line.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime = f.next()?.parse().ok()?;
    let stime = f.next()?.parse().ok()?;
    Some((utime, stime))
}

/// The process's CPU times now; `None` off Linux or when `/proc/self/stat` cannot be read.
pub fn sample() -> Option<Sample> {
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (user_ticks, system_ticks) = parse_stat(&text)?;
        // SAFETY: sysconf only reads a system setting.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let ticks_per_sec = u64::try_from(tck).ok().filter(|&t| t > 0)?;
        Some(Sample {
            user_ticks,
            system_ticks,
            ticks_per_sec,
            at: Instant::now(),
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

impl Sample {
    /// CPU use from `earlier` to `self` on the cores the process may use; `None` if no time
    /// passed or the core count is unknown.
    pub fn share_since(&self, earlier: &Sample) -> Option<CpuShare> {
        let cores = std::thread::available_parallelism().ok()?.get();
        let wall = self.at.checked_duration_since(earlier.at)?.as_secs_f64();
        let tps = self.ticks_per_sec as f64;
        let user = self.user_ticks.saturating_sub(earlier.user_ticks) as f64 / tps;
        let system = self.system_ticks.saturating_sub(earlier.system_ticks) as f64 / tps;
        share(cores, wall, user, system)
    }
}

/// The share of `cores` x `wall` seconds that `user` and `system` seconds of CPU time make.
/// Clock ticks are coarse (usually 10 ms) and can make a short interval look busier than the
/// machine: shares are clamped so that user + system never exceeds 100 %, and the busy cores
/// to the cores there are.
pub fn share(cores: usize, wall: f64, user: f64, system: f64) -> Option<CpuShare> {
    if cores == 0 || wall <= 0.0 || !wall.is_finite() {
        return None;
    }
    let capacity = cores as f64 * wall;
    let user_pct = (100.0 * user / capacity).clamp(0.0, 100.0);
    let system_pct = (100.0 * system / capacity).clamp(0.0, 100.0 - user_pct);
    Some(CpuShare {
        cores,
        busy_cores: ((user + system) / wall).min(cores as f64),
        user_pct,
        system_pct,
        idle_pct: (100.0 - user_pct - system_pct).max(0.0),
    })
}

/// `name : cpu B of C cores busy (user U %, system S %, idle I % of the machine)`, the name
/// padded like db_bench's result line.
pub fn line(name: &str, c: &CpuShare) -> String {
    format!(
        "{:<12} : cpu {:.2} of {} cores busy (user {:.1} %, system {:.1} %, idle {:.1} % of the machine)",
        name, c.busy_cores, c.cores, c.user_pct, c.system_pct, c.idle_pct
    )
}

/// Runs `f` and returns its result with the process's CPU use while it ran (`None` where it
/// cannot be measured).
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, Option<CpuShare>) {
    let before = sample();
    let r = f();
    let cpu = before.and_then(|b| sample().and_then(|a| a.share_since(&b)));
    (r, cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real /proc/self/stat line (Linux 6.x), utime 17, stime 5.
    const STAT: &str = "4321 (riptide) R 100 4321 100 34816 4321 4194304 1200 0 0 0 17 5 0 0 20 0 3 0 \
                        5000 100000000 3000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn parses_utime_and_stime() {
        assert_eq!(parse_stat(STAT), Some((17, 5)));
    }

    #[test]
    fn command_names_with_spaces_and_parentheses_count_from_the_last_paren() {
        let odd = STAT.replace("(riptide)", "(my (odd) name) S ) x)");
        assert_eq!(parse_stat(&odd), Some((17, 5)));
        let spaced = STAT.replace("(riptide)", "(my (odd) name)");
        assert_eq!(parse_stat(&spaced), Some((17, 5)));
    }

    #[test]
    fn short_or_garbled_lines_give_none() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("4321 riptide R 1 2 3"), None);
        assert_eq!(parse_stat("4321 (riptide) R 100 4321"), None);
        assert_eq!(parse_stat(&STAT.replace(" 17 5 ", " x 5 ")), None);
    }

    #[test]
    fn shares_add_up_to_100() {
        let c = share(2, 10.0, 14.24, 4.16).unwrap();
        assert!((c.busy_cores - 1.84).abs() < 1e-9);
        assert!((c.user_pct - 71.2).abs() < 1e-9);
        assert!((c.system_pct - 20.8).abs() < 1e-9);
        assert!((c.idle_pct - 8.0).abs() < 1e-9);
        assert_eq!(
            line("fillrandom", &c),
            "fillrandom   : cpu 1.84 of 2 cores busy (user 71.2 %, system 20.8 %, idle 8.0 % of the machine)"
        );
    }

    #[test]
    fn tick_rounding_never_gives_more_than_the_machine() {
        let c = share(1, 0.005, 0.01, 0.01).unwrap();
        assert_eq!((c.user_pct, c.system_pct, c.idle_pct), (100.0, 0.0, 0.0));
        assert_eq!(c.busy_cores, 1.0);
        assert!(share(0, 1.0, 0.0, 0.0).is_none());
        assert!(share(4, 0.0, 0.0, 0.0).is_none());
    }

    #[test]
    fn measures_this_process_on_linux() {
        let (sum, cpu) = measure(|| {
            let t = Instant::now();
            let mut x = 0u64;
            while t.elapsed().as_millis() < 50 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            x
        });
        assert!(sum > 0);
        if cfg!(target_os = "linux") {
            let c = cpu.expect("linux has /proc/self/stat");
            assert!(c.cores >= 1);
            // 50 ms of spinning is about 5 clock ticks of user time (of this process, whose
            // other test threads only add to it).
            assert!(c.busy_cores > 0.0, "{c:?}");
            assert!((c.user_pct + c.system_pct + c.idle_pct - 100.0).abs() < 1e-6);
        }
    }
}
