//! Which CRC-32 routine computes ICRCs in this process, chosen once, when the first device
//! opens, by timing both on a packet like those the data path carries.
//!
//! Natively crc32fast's carry-less multiplication wins by 20 times; under qemu TCG, which
//! runs PCLMULQDQ as helper calls, a table wins by 3 times (4 at header sizes; 1.6 times
//! for a whole packet's ICRC), and the ICRC was 17.5% of all CPU of a ferroce pair in the
//! project's rxe VM. Both routines give
//! the same results, so the choice changes speed only. `FERROCE_ICRC=simd|table` skips the
//! measurement.

use std::sync::OnceLock;
use std::time::Instant;

use ferroce_wire::icrc::{self, Engine};
use ferroce_wire::icrc_fold;

use crate::link::copy_fold;

/// The table must be this much faster to be chosen: a clear win, not timing noise.
const TABLE_MARGIN: f64 = 0.8;
/// Timed rounds of each engine, alternating; the fastest round of each counts.
const ROUNDS: usize = 5;
/// ICRCs per round.
const PER_ROUND: usize = 8;

/// The engine chosen, and why (for `--stats`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choice {
    pub engine: Engine,
    pub why: String,
    /// Whether payloads are folded into the ICRC as they are copied, and why.
    pub fold: String,
}

/// The process's choice, made (and applied) on first use.
pub(crate) fn choice() -> &'static Choice {
    static CHOICE: OnceLock<Choice> = OnceLock::new();
    CHOICE.get_or_init(|| {
        let env = std::env::var("FERROCE_ICRC").ok();
        let mut c = decide(env.as_deref(), measure);
        icrc::set_engine(c.engine);
        let kernels = copy_fold::kernels();
        let env = std::env::var("FERROCE_COPY_FOLD").ok();
        let (on, why, kernel) = fold_choice(c.engine, env.as_deref(), &kernels);
        if let Some(k) = kernel {
            icrc_fold::install(k);
        }
        icrc_fold::set_enabled(on);
        c.fold = why;
        tracing::info!(engine = c.engine.name(), why = %c.why, fold = %c.fold, "ICRC engine");
        c
    })
}

/// Whether payloads are folded into the ICRC as they are copied, with which of `kernels`
/// (this CPU's, widest first), and why, for `--stats`. `env` (`FERROCE_COPY_FOLD`) `0`
/// turns folding off; a kernel's name picks that one (to compare widths on one CPU); else
/// the widest. Only the SIMD engine folds: where the table wins (under an emulator)
/// carry-less multiplication is slow too.
fn fold_choice(
    engine: Engine,
    env: Option<&str>,
    kernels: &[icrc_fold::Fold],
) -> (bool, String, Option<icrc_fold::Fold>) {
    let named = env.and_then(|e| kernels.iter().find(|k| k.name == e));
    let kernel = named.or(kernels.first()).copied();
    if env == Some("0") {
        return (false, "off (FERROCE_COPY_FOLD=0)".into(), kernel);
    }
    let Some(k) = kernel else {
        return (false, format!("off ({})", copy_fold::missing()), None);
    };
    match engine {
        Engine::Simd if named.is_some() => (
            true,
            format!("on ({}, FERROCE_COPY_FOLD={})", k.name, k.name),
            kernel,
        ),
        Engine::Simd => (true, format!("on ({})", k.name), kernel),
        Engine::Table => (
            false,
            "off (the table engine computes ICRCs)".into(),
            kernel,
        ),
    }
}

/// The choice for `env` (the value of `FERROCE_ICRC`), timing the engines with `measure`
/// (nanoseconds per ICRC: SIMD, table) only when `env` does not name one.
fn decide(env: Option<&str>, measure: impl FnOnce() -> (f64, f64)) -> Choice {
    match env {
        Some("simd") => {
            return Choice {
                engine: Engine::Simd,
                why: "FERROCE_ICRC=simd".into(),
                fold: String::new(),
            }
        }
        Some("table") => {
            return Choice {
                engine: Engine::Table,
                why: "FERROCE_ICRC=table".into(),
                fold: String::new(),
            }
        }
        Some(other) => tracing::warn!(
            value = other,
            "FERROCE_ICRC takes simd or table; measuring instead"
        ),
        None => {}
    }
    let (simd, table) = measure();
    let (engine, fast, slow) = if table < simd * TABLE_MARGIN {
        (Engine::Table, table, simd)
    } else {
        (Engine::Simd, simd, table)
    };
    Choice {
        engine,
        why: format!(
            "measured: {:.2} µs against {:.2} µs per 1 KiB packet",
            fast / 1e3,
            slow / 1e3
        ),
        fold: String::new(),
    }
}

/// Nanoseconds per ICRC of a 1 KiB RDMA WRITE packet over IPv4, SIMD then table: the best
/// of [`ROUNDS`] alternating rounds each (a few tens of µs natively, under a millisecond
/// emulated).
fn measure() -> (f64, f64) {
    // IPv4 (20) + UDP (8) + BTH (12) + RETH (16) + 1 KiB, as the data path sends them.
    let mut p = vec![0u8; 20 + 8 + 12 + 16 + 1024];
    for (i, b) in p.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31);
    }
    p[0] = 0x45;
    let mut best = [f64::INFINITY; 2];
    let mut sink = 0u32;
    for _ in 0..ROUNDS {
        for (k, engine) in [Engine::Simd, Engine::Table].into_iter().enumerate() {
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                sink ^= icrc::compute_with(engine, std::hint::black_box(&p)).unwrap_or(0);
            }
            let ns = t.elapsed().as_nanos() as f64 / PER_ROUND as f64;
            best[k] = best[k].min(ns);
        }
    }
    std::hint::black_box(sink);
    (best[0], best[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_names_the_engine_without_measuring() {
        let never = || -> (f64, f64) { panic!("measured although FERROCE_ICRC was set") };
        assert_eq!(decide(Some("table"), never).engine, Engine::Table);
        assert_eq!(decide(Some("simd"), never).engine, Engine::Simd);
        assert_eq!(decide(Some("table"), never).why, "FERROCE_ICRC=table");
    }

    /// Two stand-in kernels, widest first, as `copy_fold::kernels` lists them.
    fn two_kernels() -> [icrc_fold::Fold; 2] {
        let named = |name| icrc_fold::Fold {
            name,
            ..icrc_fold::Fold::REFERENCE
        };
        [named("test-kernel"), named("narrow-kernel")]
    }

    #[test]
    fn payloads_are_folded_only_with_a_kernel_the_simd_engine_and_no_veto() {
        let both = two_kernels();
        let (on, why, kernel) = fold_choice(Engine::Simd, None, &both);
        assert_eq!((on, why.as_str()), (true, "on (test-kernel)"));
        assert_eq!(kernel.map(|k| k.name), Some("test-kernel"), "the widest");
        assert!(fold_choice(Engine::Simd, Some("1"), &both).0);
        let (on, why, _) = fold_choice(Engine::Simd, Some("0"), &both);
        assert_eq!((on, why.as_str()), (false, "off (FERROCE_COPY_FOLD=0)"));
        assert!(!fold_choice(Engine::Table, None, &both).0);
        let (on, why, kernel) = fold_choice(Engine::Simd, None, &[]);
        assert_eq!(
            (on, why),
            (false, format!("off ({})", copy_fold::missing()))
        );
        assert!(kernel.is_none());
        // The veto is the reason given whatever the CPU.
        assert_eq!(
            fold_choice(Engine::Simd, Some("0"), &[]).1,
            "off (FERROCE_COPY_FOLD=0)"
        );
    }

    #[test]
    fn a_kernel_named_in_the_environment_is_the_one_installed() {
        let both = two_kernels();
        let (on, why, kernel) = fold_choice(Engine::Simd, Some("narrow-kernel"), &both);
        assert!(on);
        assert_eq!(why, "on (narrow-kernel, FERROCE_COPY_FOLD=narrow-kernel)");
        assert_eq!(kernel.map(|k| k.name), Some("narrow-kernel"));
        // A name this CPU has no kernel for: the widest, as unset.
        let (_, why, kernel) = fold_choice(Engine::Simd, Some("avx1024"), &both);
        assert_eq!(why, "on (test-kernel)");
        assert_eq!(kernel.map(|k| k.name), Some("test-kernel"));
    }

    #[test]
    fn the_table_needs_a_clear_win() {
        // Emulated: the table three times faster.
        let c = decide(None, || (6100.0, 1900.0));
        assert_eq!(c.engine, Engine::Table);
        assert_eq!(c.why, "measured: 1.90 µs against 6.10 µs per 1 KiB packet");
        // Native: SIMD twenty times faster.
        assert_eq!(decide(None, || (50.0, 1000.0)).engine, Engine::Simd);
        // Within the margin: SIMD stays.
        assert_eq!(decide(None, || (1000.0, 900.0)).engine, Engine::Simd);
        // An unknown value measures.
        assert_eq!(
            decide(Some("fast"), || (1000.0, 100.0)).engine,
            Engine::Table
        );
    }

    #[test]
    fn measuring_times_both_engines() {
        let (simd, table) = measure();
        assert!(simd > 0.0 && simd.is_finite(), "{simd}");
        assert!(table > 0.0 && table.is_finite(), "{table}");
    }
}
