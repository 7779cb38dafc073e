//! Randomness from the OS's cryptographic source (`getrandom`): what the device's
//! keys, default iovas and QP numbers come from, and initial PSNs for applications.

use super::Error;

/// The OS's cryptographic random source, checked once here so a device never starts
/// without it. Keys, default iovas and QP numbers are all a blind attacker has to guess
/// (RoCE v2 has no authentication), so a later failure of the source is not papered
/// over with weaker numbers: it aborts the process with a message.
pub(crate) fn os_random() -> Result<ferroce_transport::FillRandom, Error> {
    let mut probe = [0u8; 8];
    getrandom::fill(&mut probe).map_err(|e| {
        Error::Io(std::io::Error::other(format!(
            "no OS random source for keys and QP numbers: {e}"
        )))
    })?;
    Ok(Box::new(|buf: &mut [u8]| {
        if let Err(e) = getrandom::fill(buf) {
            tracing::error!(%e, "OS random source failed; aborting");
            eprintln!("ferroce: OS random source failed ({e}); aborting");
            std::process::abort();
        }
    }))
}

/// A random 24-bit initial PSN from the OS's cryptographic source, for
/// [`crate::verbs::RcPath`]'s `sq_psn` (and the peer's `rq_psn`): a peer that can guess
/// it can inject requests the responder executes in sequence.
pub fn random_psn() -> Result<u32, Error> {
    getrandom::u32()
        .map(|v| v & 0x00ff_ffff)
        .map_err(|e| Error::Io(std::io::Error::other(format!("OS random source: {e}"))))
}
