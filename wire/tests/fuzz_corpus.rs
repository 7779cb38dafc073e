//! Runs every cargo-fuzz target body over its seed corpus, on stable Rust, so that plain
//! `cargo test` (and CI) exercises the fuzz properties without nightly or libFuzzer.
//!
//! The bodies live in `fuzz/src/lib.rs`, the library of the `ferroce-fuzz` package that the
//! `fuzz_targets/*.rs` files call; this test compiles that same file as a module, so each body
//! has exactly one copy. See `fuzz/README.md`.

#[path = "../../fuzz/src/lib.rs"]
mod bodies;
#[path = "../../fuzz/src/corpus_runner.rs"]
mod corpus_runner;

use std::fs;

use corpus_runner::{corpus_files, fuzz_dir, run, run_corpora};

#[test]
fn every_target_runs_over_its_seed_corpus() {
    assert!(run_corpora(bodies::TARGETS) > 0, "no fuzz input was run");
}

/// A tiny deterministic mutation pass over the three smallest seeds of each target: every
/// prefix up to 64 bytes plus a few longer ones, and every byte of the first 64 inverted.
#[test]
fn bodies_survive_truncated_and_mutated_seeds() {
    let mut runs = 0;
    for &(target, body) in bodies::TARGETS {
        let mut seeds: Vec<Vec<u8>> = corpus_files(target)
            .iter()
            .map(|f| fs::read(f).expect("readable seed"))
            .collect();
        seeds.sort_by_key(Vec::len);
        for (k, seed) in seeds.iter().take(3).enumerate() {
            let n = seed.len();
            let mut cuts: Vec<usize> = (0..=n.min(64)).collect();
            cuts.extend([n / 2, n.saturating_sub(4), n.saturating_sub(1)]);
            for cut in cuts {
                run(
                    target,
                    body,
                    &format!("seed #{k} cut to {cut}"),
                    &seed[..cut],
                );
                runs += 1;
            }
            let mut m = seed.clone();
            for i in 0..n.min(64) {
                m[i] ^= 0xff;
                run(target, body, &format!("seed #{k} byte {i} inverted"), &m);
                m[i] ^= 0xff;
                runs += 1;
            }
        }
    }
    assert!(runs > 0);
}

/// The targets whose bodies live in `fuzz/src/transport_bodies.rs` rather than in
/// `bodies::TARGETS`: they need `ferroce-transport`, which this crate cannot depend on, and
/// `transport/tests/fuzz_responder.rs` runs them over their seeds.
const TRANSPORT_TARGETS: &[&str] = &["responder"];

/// `TARGETS` plus `TRANSPORT_TARGETS`, `fuzz/corpus/*`, `fuzz/fuzz_targets/*.rs` and the
/// `[[bin]]`s of `fuzz/Cargo.toml` name the same targets, and each transport target has its
/// body in `transport_bodies.rs`.
#[test]
fn target_lists_agree() {
    let names = |dir: &str, strip: &str| -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(fuzz_dir().join(dir))
            .expect(dir)
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter_map(|n| n.strip_suffix(strip).map(str::to_owned))
            .collect();
        v.sort();
        v
    };
    let transport_bodies = fs::read_to_string(fuzz_dir().join("src/transport_bodies.rs"))
        .expect("fuzz/src/transport_bodies.rs");
    for t in TRANSPORT_TARGETS {
        assert!(
            transport_bodies.contains(&format!("pub fn {t}(data: &[u8])")),
            "no body for `{t}` in fuzz/src/transport_bodies.rs"
        );
    }
    let mut targets: Vec<String> = bodies::TARGETS
        .iter()
        .map(|(n, _)| n.to_string())
        .chain(TRANSPORT_TARGETS.iter().map(|n| n.to_string()))
        .collect();
    targets.sort();
    assert_eq!(names("corpus", ""), targets, "fuzz/corpus/ directories");
    assert_eq!(names("fuzz_targets", ".rs"), targets, "fuzz/fuzz_targets/");
    let manifest = fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let mut bins: Vec<String> = manifest
        .split("[[bin]]")
        .skip(1)
        .map(|b| {
            b.lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .expect("[[bin]] name")
                .trim_matches('"')
                .to_owned()
        })
        .collect();
    bins.sort();
    assert_eq!(bins, targets, "[[bin]] entries of fuzz/Cargo.toml");
}
