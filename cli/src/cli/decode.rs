//! `ferroce decode FILE`: print the RoCE v2 packets of a capture.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferroce::capture::{CaptureError, CaptureReader};
use ferroce_cli::decode::{classify, summarize, Classified, Totals};
use ferroce_cli::resends::ResendCheck;

use super::CliError;

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The capture file (pcap or pcapng; Ethernet, raw IP or Linux cooked link type).
    pub file: PathBuf,
    /// Print one JSON object per RoCE packet per line (reports and totals go to stderr).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DecodeArgs) -> Result<ExitCode, CliError> {
    let shown = a.file.display();
    let reader = CaptureReader::open(&a.file).map_err(|e| match e {
        CaptureError::Open(e) => format!("cannot read capture '{shown}': {e}"),
        CaptureError::Format(_) => format!("'{shown}' is {e}; give a .pcap or .pcapng file"),
    })?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut totals = Totals::default();
    let mut resends = ResendCheck::new();
    for frame in reader {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                // A damaged record ends the file: pcap has no way to resynchronise.
                eprintln!("ferroce: '{shown}': stopped at a damaged record: {e}");
                break;
            }
        };
        totals.frames += 1;
        match classify(&frame) {
            Classified::Other => totals.other += 1,
            Classified::Corrupt(e) => {
                totals.corrupt += 1;
                let report = format!(
                    "{:>5} {:.6} CORRUPT {e}",
                    frame.index,
                    frame.timestamp.as_secs_f64()
                );
                if a.json {
                    eprintln!("{report}");
                } else {
                    writeln!(out, "{report}")?;
                }
            }
            Classified::Roce(d) => {
                totals.roce += 1;
                let s = summarize(&frame, &d);
                if s.json["icrc_ok"] == false {
                    totals.icrc_bad += 1;
                }
                let reuse = resends.check(frame.index, &d);
                if a.json {
                    writeln!(out, "{}", s.json)?;
                } else {
                    writeln!(out, "{}", s.line)?;
                }
                if let Some(r) = reuse {
                    let report = format!("{:>5} {:.6} {r}", frame.index, s.time);
                    if a.json {
                        eprintln!("{report}");
                    } else {
                        writeln!(out, "{report}")?;
                    }
                }
            }
        }
    }
    let summary = format!(
        "{} frames: {} RoCE v2 ({} with a bad ICRC), {} corrupt, {} other skipped; \
         {} request PSNs reused for a different packet",
        totals.frames, totals.roce, totals.icrc_bad, totals.corrupt, totals.other, resends.reused
    );
    if a.json {
        eprintln!("{summary}");
    } else {
        writeln!(out, "{summary}")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
