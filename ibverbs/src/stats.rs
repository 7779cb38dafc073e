//! `FERROCE_STATS`: a program's device counters on its stderr, as the CLI's `--stats`
//! prints them, so that what ferroce did under an unmodified program (resends, drops,
//! how the link moved frames) can be seen. `ferroce exec --stats` sets it.
//!
//! Each device's report is printed when the program closes a context of it
//! (`ibv_close_device`) and, for the devices still open, when the process exits (rdma_cm
//! keeps the devices it opened to the end, and many programs never close theirs). Each
//! line reads `ferroce: DEVICE (pid PID, WHEN): LINE`.

use std::sync::OnceLock;

use ferroce::verbs::Context;

/// `rsocket_protocol_errors`: connections this process's rsockets ended for a peer that
/// broke their protocol (src/rsocket/flow.rs). Kept here, which rsockets count into, so
/// that this module reports it without importing rsockets (the layering test).
pub(crate) static RSOCKET_PROTOCOL_ERRORS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Whether `FERROCE_STATS` asks for reports (set, and neither empty nor `0`).
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("FERROCE_STATS").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// Prints `ctx`'s report on stderr, each line tagged with the device, the process and
/// `when` (`closed`, `at exit`).
pub(crate) fn report(ctx: &Context, when: &str) {
    let name = &ctx.attr().name;
    let pid = std::process::id();
    let mut lines = ctx.stats_report();
    let rs = RSOCKET_PROTOCOL_ERRORS.load(std::sync::atomic::Ordering::Relaxed);
    if rs > 0 {
        // Process-wide, on each device's report.
        lines.push(format!("rsocket: rsocket_protocol_errors={rs}"));
    }
    let text: String = lines
        .iter()
        .map(|l| format!("ferroce: {name} (pid {pid}, {when}): {l}\n"))
        .collect();
    // One write for the whole report: reports of several processes on one terminal do
    // not interleave line by line.
    eprint!("{text}");
}
