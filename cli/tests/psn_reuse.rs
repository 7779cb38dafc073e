//! `ferroce decode` names a requester that reuses a PSN for a different packet, on the
//! capture of Linux 6.1 rxe doing so in the interop suite (ci95, `write_bw-ipv6-fs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use ferroce::capture::CaptureReader;
use ferroce::wire::Opcode;
use ferroce_cli::decode::{classify, Classified};
use ferroce_cli::resends::ResendCheck;

fn capture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/probe/findings/rxe-6.1-write-psn-reused.pcapng")
}

#[test]
fn rxe_resending_psn_540_as_an_empty_write_only_is_found() {
    let mut check = ResendCheck::new();
    let mut found = Vec::new();
    let mut roce = 0;
    for frame in CaptureReader::open(&capture()).expect("capture") {
        let frame = frame.expect("record");
        if let Classified::Roce(d) = classify(&frame) {
            roce += 1;
            assert!(d.icrc_ok(), "frame {}", frame.index);
            if let Some(r) = check.check(frame.index, &d) {
                found.push(r);
            }
        }
    }
    assert_eq!(roce, 10);
    // Frame 3 resends frame 1 (WRITE_FIRST at 540) unchanged: a retry, not reported.
    // Frame 6 sends 540 again as a WRITE_ONLY of 0 bytes, and frame 7 sends 541, a
    // MIDDLE in frame 2, as a new message's FIRST. ferroce's ACKs (4, 5, 8, 10) are not
    // requests.
    let got: Vec<_> = found
        .iter()
        .map(|r| {
            (
                r.psn,
                r.first_index,
                r.first.opcode,
                r.now.opcode,
                r.now.ext.reth.map(|h| h.dma_len),
                r.now.payload_len,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                0xdd_90dc,
                1,
                Opcode::RC_RDMA_WRITE_FIRST,
                Opcode::RC_RDMA_WRITE_ONLY,
                Some(0),
                0
            ),
            (
                0xdd_90dd,
                2,
                Opcode::RC_RDMA_WRITE_MIDDLE,
                Opcode::RC_RDMA_WRITE_FIRST,
                Some(65536),
                4096
            ),
        ]
    );
    assert_eq!(check.reused, 2);
    assert_eq!(found[0].src.to_string(), "fe80::aff:fe4d:2");
}

#[test]
fn decode_prints_the_reuse_and_counts_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferroce"))
        .arg("decode")
        .arg(capture())
        .output()
        .expect("run ferroce decode");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let reports: Vec<&str> = text.lines().filter(|l| l.contains("PSN REUSED")).collect();
    assert_eq!(reports.len(), 2, "{text}");
    assert!(
        reports[0].contains(
            "fe80::aff:fe4d:2 -> fe80::aff:fe4d:1 qp=0x2daa56 psn=14520540: now RC_RDMA_WRITE_ONLY"
        ),
        "{text}"
    );
    let last = text.lines().last().expect("summary");
    assert!(
        last.ends_with("(0 with a bad ICRC), 0 corrupt, 0 other skipped; 2 request PSNs reused for a different packet"),
        "{last}"
    );
}
