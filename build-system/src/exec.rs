//! A small parallel executor: `workers` threads take jobs in the given order; a make/cargo
//! jobserver, when present, bounds how many run at once across the whole build tree.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

/// Run `work` over `jobs` on `workers` threads; `done` sees each result on the calling thread
/// as it arrives (index, result). When `stops` says a result is a stop, no job starts after it
/// (decided on the worker, before it takes another job, so `-j 1` runs nothing more). After
/// SIGINT/SIGTERM ([`crate::interrupt`]) no job starts either.
pub fn run<J: Sync, R: Send>(
    jobs: &[J],
    workers: usize,
    jobserver: Option<&jobserver::Client>,
    work: impl Fn(&J) -> R + Sync,
    stops: impl Fn(&R) -> bool + Sync,
    mut done: impl FnMut(usize, R),
) {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let workers = workers.clamp(1, jobs.len().max(1));
    let (tx, rx) = mpsc::channel::<(usize, R)>();
    std::thread::scope(|s| {
        for w in 0..workers {
            let tx = tx.clone();
            let (next, stop, work, stops) = (&next, &stop, &work, &stops);
            s.spawn(move || loop {
                if stop.load(Ordering::Relaxed) || crate::interrupt::interrupted() {
                    break;
                }
                // Worker 0 runs on the token this process already holds; others take one.
                let token = match (w, jobserver) {
                    (0, _) | (_, None) => None,
                    (_, Some(c)) => match c.acquire() {
                        Ok(t) => Some(t),
                        Err(_) => break,
                    },
                };
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs.len()
                    || stop.load(Ordering::Relaxed)
                    || crate::interrupt::interrupted()
                {
                    drop(token);
                    break;
                }
                let r = work(&jobs[i]);
                drop(token);
                if stops(&r) {
                    stop.store(true, Ordering::Relaxed);
                }
                if tx.send((i, r)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            done(i, r);
        }
    });
}

/// The jobserver this process inherited from make or cargo, if any.
pub fn inherited_jobserver() -> Option<jobserver::Client> {
    // SAFETY: called once at start-up before any other file descriptors are opened by us;
    // the descriptors named in MAKEFLAGS belong to the jobserver.
    unsafe { jobserver::Client::from_env() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_every_job_once_and_stops_on_request() {
        let jobs: Vec<u32> = (0..100).collect();
        let mut seen = [false; 100];
        run(
            &jobs,
            4,
            None,
            |j| j * 2,
            |_| false,
            |i, r| {
                assert_eq!(r, jobs[i] * 2);
                assert!(!seen[i]);
                seen[i] = true;
            },
        );
        assert!(seen.iter().all(|s| *s));

        let mut count = 0;
        run(&jobs, 1, None, |j| *j, |r| *r == 9, |_, _| count += 1);
        assert_eq!(count, 10, "job 9 stops the run; nothing starts after it");
    }
}
