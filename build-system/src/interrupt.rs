//! SIGINT and SIGTERM during a build. Compilers run in their own process groups (so a
//! timeout can kill everything one started), which also means the terminal's Ctrl-C does not
//! reach them. [`install`] sets a handler that only raises a flag and writes a byte to a pipe;
//! a watcher thread then kills every registered compiler process group. The build sees the
//! flag, starts nothing more, lets each worker remove its scratch directory, writes no
//! manifest, and returns [`crate::build::BuildError::Interrupted`]; the binary exits 130.
//!
//! Outside a build (no [`BuildScope`] alive) the watcher exits 130 at once. Inside one, a
//! second signal, or a build that has not stopped within [`GRACE`], exits 130 too.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How long a build may take to wind down after a signal before the process exits anyway.
pub const GRACE: Duration = Duration::from_secs(10);

/// The exit status of an interrupted kbuild.
pub const EXIT_CODE: u8 = 130;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);
static ACTIVE_BUILDS: AtomicUsize = AtomicUsize::new(0);
static GROUPS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

/// Whether SIGINT or SIGTERM arrived since [`install`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

extern "C" fn on_signal(_: libc::c_int) {
    // Only async-signal-safe work here: an atomic store and write(2).
    INTERRUPTED.store(true, Ordering::SeqCst);
    let fd = PIPE_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: write(2) of one byte from a live stack variable to our own pipe.
        unsafe {
            libc::write(fd, std::ptr::addr_of!(byte).cast(), 1);
        }
    }
}

/// Install the SIGINT/SIGTERM handler and its watcher thread (once per process; later calls
/// do nothing). Call it from a binary's `main`, not from library code: it changes what the
/// signals do to the whole process.
pub fn install() -> std::io::Result<()> {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [read_fd, write_fd] = fds;
    PIPE_WRITE.store(write_fd, Ordering::SeqCst);
    std::thread::Builder::new()
        .name("kbuild-signals".into())
        .spawn(move || watch(read_fd))?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; we set the handler, an empty mask and
        // SA_RESTART (interrupted system calls resume), then install it.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The watcher: one byte per signal.
fn watch(read_fd: libc::c_int) {
    let mut signals = 0u32;
    loop {
        let mut byte = 0u8;
        // SAFETY: read(2) of one byte into a live stack variable from our own pipe.
        let n = unsafe { libc::read(read_fd, std::ptr::addr_of_mut!(byte).cast(), 1) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return;
        }
        signals += 1;
        kill_all_groups();
        if ACTIVE_BUILDS.load(Ordering::SeqCst) == 0 || signals > 1 {
            std::process::exit(i32::from(EXIT_CODE));
        }
        if signals == 1 {
            let _ = std::thread::Builder::new()
                .name("kbuild-signal-grace".into())
                .spawn(|| {
                    std::thread::sleep(GRACE);
                    kill_all_groups();
                    std::process::exit(i32::from(EXIT_CODE));
                });
        }
    }
}

fn kill_all_groups() {
    let groups = match GROUPS.lock() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    };
    for pgid in groups {
        kill_group(pgid);
    }
}

fn kill_group(pgid: libc::pid_t) {
    if pgid > 1 {
        // SAFETY: kill(2) with a negative pid signals exactly that process group.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// A compiler's process group, registered while it runs: a signal kills it. Registering
/// after the signal kills it at once.
pub struct GroupGuard(libc::pid_t);

/// Register the process group `pgid` (a child spawned with `process_group(0)`).
pub fn register_group(pgid: u32) -> Option<GroupGuard> {
    let pgid = libc::pid_t::try_from(pgid).ok()?;
    let mut groups = match GROUPS.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    groups.push(pgid);
    drop(groups);
    // A signal that arrived between the spawn and the push found no group to kill.
    if interrupted() {
        kill_group(pgid);
    }
    Some(GroupGuard(pgid))
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let mut groups = match GROUPS.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(i) = groups.iter().position(|g| *g == self.0) {
            groups.swap_remove(i);
        }
    }
}

/// Held while a build runs: a signal then lets the build wind down (kill, clean up, no
/// manifest) instead of exiting at once.
pub struct BuildScope(());

impl BuildScope {
    pub fn enter() -> BuildScope {
        ACTIVE_BUILDS.fetch_add(1, Ordering::SeqCst);
        BuildScope(())
    }
}

impl Drop for BuildScope {
    fn drop(&mut self) {
        ACTIVE_BUILDS.fetch_sub(1, Ordering::SeqCst);
    }
}
