//! The seed-corpus runner of the stable-Rust tests that run the fuzz target bodies:
//! `wire/tests/fuzz_corpus.rs` and `transport/tests/fuzz_responder.rs` each include this
//! file with `#[path]`, beside the bodies they test. It is not part of the `ferroce-fuzz`
//! library (nightly and libFuzzer run the same corpora through `cargo fuzz`).

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// The `fuzz/` directory, beside the including crate's.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `fuzz/corpus/<target>/`, sorted by name (with any inputs a local
/// `cargo fuzz run` added: git-ignored, but just as valid).
pub fn corpus_files(target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// A fuzz target body, as both body files declare it.
pub type Body = fn(&[u8]);

/// Runs `body` on `data`, naming the input if a property of the target fails.
pub fn run(target: &str, body: Body, input: &str, data: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| body(data))).is_err() {
        panic!(
            "fuzz target `{target}` failed on {input}; reproduce with \
             `cd fuzz && cargo +nightly fuzz run {target} <file>`"
        );
    }
}

/// Runs each target's body over every file of its corpus, which must not be empty;
/// returns how many inputs ran.
pub fn run_corpora(targets: &[(&str, Body)]) -> usize {
    let mut total = 0;
    for &(target, body) in targets {
        let files = corpus_files(target);
        assert!(
            !files.is_empty(),
            "fuzz/corpus/{target}/ is empty; regenerate the seeds (fuzz/README.md)"
        );
        for f in &files {
            let data = fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            run(target, body, &f.display().to_string(), &data);
        }
        eprintln!("{target}: ran {} inputs", files.len());
        total += files.len();
    }
    total
}
