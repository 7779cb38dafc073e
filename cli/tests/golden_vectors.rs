//! The golden vectors: real Linux rxe traffic must parse, verify and re-emit byte for byte,
//! and per-file opcode histograms must equal the MANIFEST written when they were captured.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ferroce::capture::CaptureReader;
use ferroce::wire::{Frame, FrameRepr, Opcode};
use ferroce_cli::decode::{classify, Classified};

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/rxe")
}

/// One row of MANIFEST.md's table.
#[derive(Debug)]
struct Expected {
    file: String,
    a_to_b: usize,
    b_to_a: usize,
    packets: usize,
    roce: usize,
    histogram: BTreeMap<u8, (String, usize)>,
}

fn manifest() -> Vec<Expected> {
    let text = std::fs::read_to_string(vectors_dir().join("MANIFEST.md")).expect("MANIFEST.md");
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 6, "manifest row: {line}");
        let pair = |c: &str| -> (usize, usize) {
            let (a, b) = c.split_once('/').expect("a / b");
            (
                a.trim().parse().expect("count"),
                b.trim().parse().expect("count"),
            )
        };
        let (a_to_b, b_to_a) = pair(cells[3]);
        let (packets, roce) = pair(cells[4]);
        let mut histogram = BTreeMap::new();
        for entry in cells[5].split(", ") {
            // "0x04 RC_SEND_ONLY ×10"
            let mut it = entry.split_whitespace();
            let op = u8::from_str_radix(it.next().unwrap().trim_start_matches("0x"), 16).unwrap();
            let name = it.next().unwrap().to_string();
            let count = it.next().unwrap().trim_start_matches('×').parse().unwrap();
            histogram.insert(op, (name, count));
        }
        rows.push(Expected {
            file: cells[0].trim_matches('`').to_string(),
            a_to_b,
            b_to_a,
            packets,
            roce,
            histogram,
        });
    }
    rows
}

#[test]
fn manifest_lists_every_capture() {
    let rows = manifest();
    assert_eq!(rows.len(), 18);
    let mut on_disk: Vec<String> = std::fs::read_dir(vectors_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".pcap"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = rows.iter().map(|r| r.file.clone()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

#[test]
fn every_rxe_packet_parses_verifies_and_round_trips() {
    let a: IpAddr = "10.77.0.1".parse().unwrap();
    let b: IpAddr = "10.77.0.2".parse().unwrap();
    let mut total_roce = 0;
    for exp in manifest() {
        let mut histogram: BTreeMap<u8, (String, usize)> = BTreeMap::new();
        let (mut frames, mut roce, mut a_to_b, mut b_to_a) = (0, 0, 0, 0);
        for frame in CaptureReader::open(&vectors_dir().join(&exp.file)).unwrap() {
            let frame = frame.unwrap();
            frames += 1;
            let d = match classify(&frame) {
                Classified::Roce(d) => d,
                Classified::Other => continue,
                Classified::Corrupt(e) => panic!("{} #{}: {e}", exp.file, frame.index),
            };
            roce += 1;
            d.verify_icrc()
                .unwrap_or_else(|e| panic!("{} #{}: {e}", exp.file, frame.index));
            let op = d.ib().opcode();
            histogram
                .entry(op.value())
                .or_insert_with(|| (op.name().to_string(), 0))
                .1 += 1;
            let src = d.src_gid().to_ipv4_mapped().map(IpAddr::V4).unwrap();
            if src == a {
                a_to_b += 1;
            } else if src == b {
                b_to_a += 1;
            }

            // Emit the parsed form: identical bytes, ICRC included.
            let parsed = Frame::parse(&frame.data).unwrap();
            let repr = FrameRepr::parse(&parsed).unwrap();
            let mut out = vec![0u8; repr.buffer_len()];
            let n = repr.emit(&mut out).unwrap();
            assert_eq!(n, frame.data.len(), "{} #{}", exp.file, frame.index);
            assert_eq!(
                out, frame.data,
                "{} #{}: re-emitted bytes differ",
                exp.file, frame.index
            );
        }
        assert_eq!(frames, exp.packets, "{}: frames", exp.file);
        assert_eq!(roce, exp.roce, "{}: RoCE packets", exp.file);
        assert_eq!(
            (a_to_b, b_to_a),
            (exp.a_to_b, exp.b_to_a),
            "{}: directions",
            exp.file
        );
        assert_eq!(histogram, exp.histogram, "{}: opcode histogram", exp.file);
        total_roce += roce;
    }
    assert_eq!(total_roce, 320);
}

#[test]
fn table_names_match_the_manifest_names() {
    for exp in manifest() {
        for (v, (name, _)) in &exp.histogram {
            assert_eq!(
                Opcode::new(*v).map(|o| o.name()),
                Some(name.as_str()),
                "{}",
                exp.file
            );
        }
    }
}

/// `ferroce decode` names the CM message in every MAD of rdma_cm's captures
/// (`tests/vectors/rxe-cm`), with rdma_cm's addresses and the REJ's reason.
#[test]
fn decode_shows_the_cm_messages_of_rdma_cm() {
    use ferroce_cli::decode::summarize;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/rxe-cm");
    let cm_of = |file: &str| -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        for frame in CaptureReader::open(&dir.join(file)).unwrap() {
            let frame = frame.unwrap();
            if let Classified::Roce(d) = classify(&frame) {
                let s = summarize(&frame, &d);
                if let Some(cm) = s.json.get("cm") {
                    assert!(s.line.contains(" | CM "), "{}", s.line);
                    out.push(cm.clone());
                }
            }
        }
        out
    };
    let types = |v: &[serde_json::Value]| -> Vec<String> {
        v.iter()
            .map(|c| c["type"].as_str().unwrap().to_owned())
            .collect()
    };
    let rping = cm_of("cm_rping.pcap");
    assert_eq!(types(&rping), ["REQ", "REP", "RTU", "DREQ", "DREP"]);
    assert_eq!(rping[0]["service_id"], 0x0106_1d2f);
    assert_eq!(rping[0]["rdma_cm"]["src"], "10.77.0.1");
    assert_eq!(rping[0]["rdma_cm"]["dst"], "10.77.0.2");
    assert_eq!(rping[1]["remote_comm_id"], rping[0]["local_comm_id"]);
    let rej = cm_of("cm_rej.pcap");
    assert_eq!(types(&rej), ["REQ", "REJ"]);
    assert_eq!(rej[1]["reason"], 8, "invalid service ID: nobody listens");
    let sidr = cm_of("cm_udaddy.pcap");
    assert_eq!(
        types(&sidr),
        ["SIDR_REQ", "SIDR_REQ", "SIDR_REP", "SIDR_REP"]
    );
    assert_eq!(sidr[2]["status"], 0);
}
