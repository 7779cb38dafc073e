//! The library's log: `FERROCE_LOG=debug` (an `EnvFilter` directive, as `RUST_LOG` is for
//! the CLI) prints ferroce's tracing events on the program's stderr. Unset, nothing is
//! installed and the program's own output stays as it is. Colours only on a terminal.

use std::sync::Once;

static INIT: Once = Once::new();

/// Installs the stderr log once, if FERROCE_LOG asks for it (first device list or rdma_cm
/// channel or ID of the process).
pub(crate) fn init() {
    INIT.call_once(|| {
        let Ok(directive) = std::env::var("FERROCE_LOG") else {
            return;
        };
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(directive))
            .with_writer(std::io::stderr)
            // Colours only for a terminal: a log file or a pipe gets plain `key=value`
            // text that grep finds.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init();
    });
}
