//! Runs the ferroce-transport fuzz target bodies (`responder`) over their seed corpus on
//! stable Rust, plus a small deterministic mutation pass, so that plain `cargo test`
//! exercises the fuzz invariants without nightly or libFuzzer.
//!
//! The bodies live in `fuzz/src/transport_bodies.rs`, which `fuzz/fuzz_targets/responder.rs`
//! includes the same way; see `fuzz/README.md`. The seeds come from
//! `tests/fuzz_responder_seeds.rs`.

// Not every item of the shared file is used by this test.
#[allow(dead_code)]
#[path = "../../fuzz/src/transport_bodies.rs"]
mod bodies;
#[path = "../../fuzz/src/corpus_runner.rs"]
mod corpus_runner;

use std::fs;

use corpus_runner::{corpus_files, fuzz_dir, run, run_corpora};
use ferroce_transport::testing::Rng;

#[test]
fn every_target_runs_over_its_seed_corpus() {
    assert!(run_corpora(bodies::TARGETS) > 0, "no fuzz input was run");
}

/// Deterministic mutations of the committed `seed-*` files: every cut at a chunk boundary
/// and a few inside, each of the first 48 bytes inverted, random byte edits (with and
/// without the FIX bit) and splices of two seeds.
#[test]
fn bodies_survive_truncated_and_mutated_seeds() {
    let mut rng = Rng::new(0x5eed);
    let mut runs = 0;
    for &(target, body) in bodies::TARGETS {
        let seeds: Vec<(String, Vec<u8>)> = corpus_files(target)
            .iter()
            .filter(|f| {
                f.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("seed-") || n.starts_with("regress-"))
            })
            .map(|f| {
                let name = f.file_name().expect("name").to_string_lossy().into_owned();
                (name, fs::read(f).expect("readable seed"))
            })
            .collect();
        assert!(!seeds.is_empty());
        for (name, seed) in &seeds {
            let n = seed.len();
            let mut m = seed.clone();
            let mut try_one = |what: String, data: &[u8]| {
                run(target, body, &format!("{name} {what}"), data);
                runs += 1;
            };
            for cut in [1, 3, 12, 15, 20, n / 2, n - 1] {
                if cut < n {
                    try_one(format!("cut to {cut}"), &seed[..cut]);
                }
            }
            for i in 0..n.min(48) {
                m[i] ^= 0xff;
                try_one(format!("byte {i} inverted"), &m);
                m[i] ^= 0xff;
            }
            for k in 0..24 {
                let mut m = seed.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(n as u64) as usize;
                    m[at] = rng.next_u64() as u8;
                }
                if k % 2 == 0 {
                    m[0] |= bodies::FIX;
                }
                try_one(format!("random edit #{k}"), &m);
            }
            let (other_name, other) = &seeds[rng.below(seeds.len() as u64) as usize];
            let spliced = [&seed[..], &other[..]].concat();
            try_one(format!("followed by {other_name}"), &spliced);
        }
    }
    assert!(runs > 0);
    eprintln!("ran {runs} mutated inputs");
}

/// Each target of `transport_bodies.rs` has its corpus directory, its
/// `fuzz_targets/<name>.rs` (which includes this file) and a `[[bin]]` in
/// `fuzz/Cargo.toml`. (`wire/tests/fuzz_corpus.rs` checks the lists as a whole.)
#[test]
fn targets_are_wired_into_the_fuzz_package() {
    let manifest = fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for &(target, _) in bodies::TARGETS {
        assert!(fuzz_dir().join("corpus").join(target).is_dir());
        let src = fs::read_to_string(fuzz_dir().join(format!("fuzz_targets/{target}.rs")))
            .expect("fuzz_targets/<target>.rs");
        assert!(src.contains("\"../src/transport_bodies.rs\""));
        assert!(src.contains(&format!("transport_bodies::{target}(data)")));
        assert!(manifest.contains(&format!("name = \"{target}\"")));
    }
}
