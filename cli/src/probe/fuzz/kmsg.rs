//! Watching the kernel log (`/dev/kmsg`) for what a kernel stack under fuzzing must never
//! print: warnings, BUGs, oopses, sanitizer reports, lockups. Only records written after
//! the watch began count.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;

/// Kernel log lines that mean the kernel is unwell.
const PATTERNS: &[&str] = &[
    "WARNING:",
    "BUG:",
    "BUG ",
    "Oops",
    "general protection fault",
    "Call Trace",
    "UBSAN:",
    "KASAN:",
    "kernel BUG",
    "soft lockup",
    "hard LOCKUP",
    "hung_task",
    "blocked for more than",
    "rcu_sched self-detected stall",
    "refcount_t:",
    "list_add corruption",
    "list_del corruption",
];

/// An open watch on the kernel log.
#[derive(Debug)]
pub struct Kmsg {
    file: File,
}

impl Kmsg {
    /// Starts watching: later records only.
    pub fn open() -> Result<Kmsg, String> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .map_err(|e| {
                format!(
                    "cannot read the kernel log /dev/kmsg: {e} (run as root, or leave out --kmsg)"
                )
            })?;
        file.seek(SeekFrom::End(0))
            .map_err(|e| format!("cannot seek /dev/kmsg: {e}"))?;
        Ok(Kmsg { file })
    }

    /// The worrying lines logged since the last call.
    pub fn problems(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        // One record per read; bounded, so a kernel that logs without end cannot hold us.
        for _ in 0..10_000 {
            match self.file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let rec = String::from_utf8_lossy(&buf[..n]);
                    let msg = rec.split_once(';').map_or(&*rec, |(_, m)| m);
                    let msg = msg.lines().next().unwrap_or("").trim();
                    if is_problem(msg) && out.len() < 20 {
                        out.push(msg.to_string());
                    }
                }
                // Records overwritten before we read them: go on with the next.
                Err(e) if e.kind() == ErrorKind::BrokenPipe => continue,
                Err(_) => break,
            }
        }
        out
    }
}

/// Whether a kernel log message is one of [`PATTERNS`].
pub fn is_problem(msg: &str) -> bool {
    PATTERNS.iter().any(|p| msg.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_and_oopses_are_problems() {
        for m in [
            "WARNING: CPU: 1 PID: 42 at drivers/infiniband/sw/rxe/rxe_resp.c:123 rxe_receiver+0x1/0x2",
            "BUG: KASAN: slab-out-of-bounds in rxe_copy",
            "Oops: 0000 [#1] PREEMPT SMP",
            "watchdog: BUG: soft lockup - CPU#0 stuck for 22s!",
        ] {
            assert!(is_problem(m), "{m}");
        }
        for m in [
            "rdma_rxe: loaded",
            "IPv6: ADDRCONF(NETDEV_CHANGE): vethP: link becomes ready",
            "rxe0: rxe_set_mtu: Set mtu to 1024",
        ] {
            assert!(!is_problem(m), "{m}");
        }
    }
}
