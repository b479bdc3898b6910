//! Handing freed heap memory back to the system.
//!
//! A manager's memory comes in bursts (a relist of every Machine, a hundred reconciles at once, the
//! clusters created in one apply) and settles to far less. glibc's allocator keeps what a burst freed:
//! each thread that allocates gets an arena of its own (up to eight per core), and free pages in the
//! middle of an arena are only returned by `malloc_trim`. Measured at 100 clusters at rest, the
//! control-plane manager had 30 MB in use and 48 MB taken from the system. Go's runtime returns such
//! memory by itself; here [`block_on`] caps the arenas before any worker starts and [`give_back`] trims
//! them on a slow timer. Other allocators and platforms are left as they are.

use std::time::Duration;

/// How often freed memory is handed back: slow enough to cost nothing measurable (one trim walks
/// the free lists, well under a millisecond at these sizes), soon enough that a burst does not stay.
pub const GIVE_BACK_EVERY: Duration = Duration::from_secs(60);

/// At most this many glibc arenas: one per tokio worker on the small machines managers run on, so
/// that memory freed by one worker is reused by the other rather than kept apart.
const ARENAS: i32 = 2;

/// Runs a manager's `main` to its exit code on a multi-threaded runtime built after [`limit_arenas`],
/// so that its workers start under the cap: capped later, workers that had allocated kept arenas of
/// their own (three were seen at 1,000 clusters).
pub fn block_on(main: impl Future<Output = std::process::ExitCode>) -> std::process::ExitCode {
    limit_arenas();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(main),
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Caps glibc's arenas from now on; arenas made before stay.
fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; M_ARENA_MAX takes any positive count.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Returns the free pages of every arena to the system; true when some were returned.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim walks the allocator's own free lists under its locks.
    unsafe {
        libc::malloc_trim(0) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Trims every [`GIVE_BACK_EVERY`], until dropped.
pub async fn give_back() {
    let mut every = tokio::time::interval(GIVE_BACK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        let returned = trim();
        tracing::trace!(returned, "freed heap memory handed back");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory freed in the middle of the heap (a burst of which every hundredth block is still
    /// alive, so that neither the heap's top nor a whole heap can be released on free) is returned
    /// by a trim.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_freed_burst_is_handed_back() {
        fn resident_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
                .unwrap()
        }
        // Small blocks (below mmap's threshold) come from the heap, not from mmap.
        let burst: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8 | 1; 4000]).collect();
        let pinned: Vec<Vec<u8>> = burst.into_iter().step_by(100).collect();
        let before = resident_kib();
        assert!(trim(), "a trim after a freed 80 MB burst returns pages");
        let after = resident_kib();
        assert!(
            after + 40_000 < before,
            "resident memory went from {before} KiB to {after} KiB"
        );
        drop(pinned);
    }
}
