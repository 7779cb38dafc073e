//! Recording every frame sent and received to a pcap file (`--pcap`).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::capture::PcapSink;

/// The optional pcap sink.
#[derive(Default)]
pub(super) struct Recorder {
    /// A leaf lock (see the lock order in the module docs).
    pcap: Mutex<Option<PcapSink<io::BufWriter<std::fs::File>>>>,
    /// Whether `pcap` holds a sink: spares the lock on every frame when not recording.
    recording: AtomicBool,
}

impl Recorder {
    /// Starts recording to `path` (replacing an earlier recording).
    pub(super) fn start(&self, path: &Path) -> io::Result<()> {
        *self.lock() = Some(PcapSink::create(path)?);
        self.recording.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Records one frame, if recording.
    pub(super) fn record(&self, frame: &[u8]) {
        if !self.recording.load(Ordering::Relaxed) {
            return;
        }
        let mut p = self.lock();
        if let Some(sink) = p.as_mut() {
            let ts = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            if let Err(e) = sink.write(ts, frame) {
                tracing::warn!(error = %e, "pcap write failed; recording stopped");
                *p = None;
                self.recording.store(false, Ordering::SeqCst);
            }
        }
    }

    /// Stops recording and flushes the file.
    pub(super) fn finish(&self) {
        self.recording.store(false, Ordering::SeqCst);
        if let Some(sink) = self.lock().take() {
            let _ = io::Write::flush(&mut sink.into_inner());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<PcapSink<io::BufWriter<std::fs::File>>>> {
        self.pcap.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
