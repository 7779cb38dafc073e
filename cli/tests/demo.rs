//! The README's first command, `ferroce demo`, as a newcomer runs it: built-in defaults,
//! no privileges, every RC operation moved through the real driver and checked.

use std::process::Command;

/// Every operation the demo promises, as its table names them.
const OPERATIONS: [&str; 7] = [
    "SEND (checked by server)",
    "SEND_WITH_IMM (checked by server)",
    "RDMA_WRITE ",
    "RDMA_WRITE_WITH_IMM (checked by server)",
    "RDMA_READ",
    "ATOMIC_FETCH_ADD",
    "ATOMIC_CMP_SWAP",
];

#[test]
fn the_demo_verifies_every_operation_with_its_defaults() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferroce"))
        .arg("demo")
        .output()
        .expect("run ferroce demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    for op in OPERATIONS {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(op))
            .unwrap_or_else(|| panic!("no row for {op:?} in:\n{stdout}"));
        // "<operation> <count> <bytes>  verified": the defaults, 20 iterations of 64 KiB.
        let fields: Vec<&str> = row[op.len()..].split_whitespace().collect();
        assert_eq!(fields.last(), Some(&"verified"), "{row}");
        let count: u64 = fields[0].parse().expect("count");
        let bytes: u64 = fields[1].parse().expect("bytes");
        assert!(count >= 20, "{row}");
        assert!(bytes > 0, "{row}");
    }
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("all operations verified in ")),
        "{stdout}"
    );
    // The client's counters show frames really went over the wire, with no ICRC errors.
    let counters = stdout
        .lines()
        .find(|l| l.starts_with("client counters: "))
        .unwrap_or_else(|| panic!("no counters in:\n{stdout}"));
    assert!(counters.contains("sent_pkts="), "{counters}");
    assert!(!counters.contains("icrc_err"), "{counters}");
}
