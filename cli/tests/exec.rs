//! `ferroce exec`: the library's directory first on LD_LIBRARY_PATH, the program in place
//! of ferroce (exit codes, signals, process id), one-line errors, and CAP_NET_RAW passed on
//! as an ambient capability.
//!
//! None of these needs ferroce's libibverbs: the library is a dummy file (the programs run
//! are sh and friends, which do not load it). The layout checks run a hard link of the
//! ferroce binary in a directory of their own, where they choose what lies next to it. The
//! test that needs root is `#[ignore]`d; tests/system.sh runs it.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const FERROCE: &str = env!("CARGO_BIN_EXE_ferroce");

/// A fresh empty directory under cargo's temporary directory for integration tests.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("exec-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The ferroce binary at `dir/ferroce` (a hard link; a copy across file systems).
fn ferroce_in(dir: &Path) -> PathBuf {
    let f = dir.join("ferroce");
    if std::fs::hard_link(FERROCE, &f).is_err() {
        std::fs::copy(FERROCE, &f).unwrap();
    }
    f
}

/// `ferroce exec` with a clean environment as to FERROCE_LIBDIR and LD_LIBRARY_PATH.
fn exec(ferroce: &Path, libdir: Option<&Path>, ld_path: Option<&str>, args: &[&str]) -> Command {
    let mut c = Command::new(ferroce);
    c.arg("exec").arg("--").args(args);
    c.env_remove("FERROCE_LIBDIR").env_remove("LD_LIBRARY_PATH");
    if let Some(d) = libdir {
        c.env("FERROCE_LIBDIR", d);
    }
    if let Some(p) = ld_path {
        c.env("LD_LIBRARY_PATH", p);
    }
    c
}

fn output(mut c: Command) -> Output {
    c.output().expect("run ferroce")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The one stderr line of a failed run, and its exit code.
fn one_line_failure(o: &Output) -> (i32, String) {
    assert!(!o.status.success(), "succeeded: {o:?}");
    let err = String::from_utf8_lossy(&o.stderr).trim_end().to_string();
    assert_eq!(err.lines().count(), 1, "expected one line, got:\n{err}");
    (o.status.code().unwrap_or(-1), err)
}

/// Prints LD_LIBRARY_PATH, then where the first entry's libibverbs.so.1 leads (the symlink
/// itself, then the file at its end), then the same for its librdmacm.so.1.
const SHOW: &str = r#"echo "$LD_LIBRARY_PATH"; d=${LD_LIBRARY_PATH%%:*}; for l in libibverbs.so.1 librdmacm.so.1; do readlink "$d/$l" || echo "(not a symlink)"; readlink -e "$d/$l" || echo "(missing)"; done"#;

#[test]
fn cargo_layout_private_dir_first_with_a_symlink_to_the_built_library() {
    let t = scratch("cargo-layout");
    let f = ferroce_in(&t);
    std::fs::write(t.join("libibverbs.so"), b"not really a library").unwrap();
    let real = std::fs::canonicalize(t.join("libibverbs.so")).unwrap();
    let private = t.join("ferroce-lib");
    // Made on first use; found as it is the second time; the old path is kept after it.
    for old in [Some("/opt/x/lib:/opt/y/lib"), None, Some("")] {
        let out = stdout(&output(exec(&f, None, old, &["sh", "-c", SHOW])));
        let lines: Vec<&str> = out.lines().collect();
        let expect_path = match old {
            Some(o) if !o.is_empty() => format!("{}:{o}", private.display()),
            _ => private.display().to_string(),
        };
        // Both names lead to the one library (the loader then loads it once).
        assert_eq!(
            lines,
            [
                expect_path.as_str(),
                "../libibverbs.so",
                real.to_str().unwrap(),
                "../libibverbs.so",
                real.to_str().unwrap()
            ]
        );
    }
    // A wrong symlink is replaced.
    let link = private.join("libibverbs.so.1");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("/nonexistent/libibverbs.so", &link).unwrap();
    let out = stdout(&output(exec(&f, None, None, &["sh", "-c", SHOW])));
    assert_eq!(out.lines().nth(2), real.to_str());
    std::fs::remove_dir_all(&t).unwrap();
}

#[test]
fn installed_layout_uses_lib_ferroce() {
    let t = scratch("installed-layout");
    std::fs::create_dir_all(t.join("bin")).unwrap();
    std::fs::create_dir_all(t.join("lib/ferroce")).unwrap();
    let f = ferroce_in(&t.join("bin"));
    std::fs::write(t.join("lib/ferroce/libibverbs.so.1"), b"lib").unwrap();
    // An installed librdmacm.so.1 is a symlink to the same library.
    std::os::unix::fs::symlink("libibverbs.so.1", t.join("lib/ferroce/librdmacm.so.1")).unwrap();
    let out = stdout(&output(exec(&f, None, Some("/old"), &["sh", "-c", SHOW])));
    let lib = std::fs::canonicalize(t.join("lib/ferroce")).unwrap();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("{}:/old", t.join("lib/ferroce").display()),
            "(not a symlink)".to_string(),
            lib.join("libibverbs.so.1").display().to_string(),
            "libibverbs.so.1".to_string(),
            lib.join("libibverbs.so.1").display().to_string()
        ]
    );
    std::fs::remove_dir_all(&t).unwrap();
}

#[test]
fn ferroce_libdir_wins_over_the_built_library() {
    let t = scratch("libdir");
    let f = ferroce_in(&t);
    std::fs::write(t.join("libibverbs.so"), b"built").unwrap();
    let lib = t.join("mylib");
    std::fs::create_dir(&lib).unwrap();
    std::fs::write(lib.join("libibverbs.so.1"), b"mine").unwrap();
    let out = stdout(&output(exec(
        &f,
        Some(&lib),
        Some("/old"),
        &["sh", "-c", SHOW],
    )));
    assert_eq!(
        out.lines().next(),
        Some(format!("{}:/old", lib.display()).as_str())
    );
    assert!(
        !t.join("ferroce-lib").exists(),
        "the private directory was made anyway"
    );

    // An empty FERROCE_LIBDIR directory: one line that says what to do, exit 2, and the
    // program does not run.
    let empty = t.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let marker = t.join("ran");
    let o = output(exec(
        &f,
        Some(&empty),
        None,
        &["touch", marker.to_str().unwrap()],
    ));
    let (code, err) = one_line_failure(&o);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("FERROCE_LIBDIR={}", empty.display()))
            && err.contains("holds no libibverbs.so.1"),
        "{err}"
    );
    assert!(!marker.exists(), "the program ran");
    std::fs::remove_dir_all(&t).unwrap();
}

#[test]
fn no_library_anywhere_is_one_line_saying_how_to_build_it() {
    let t = scratch("no-library");
    let f = ferroce_in(&t);
    let (code, err) = one_line_failure(&output(exec(&f, None, None, &["true"])));
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("no libibverbs.so next to {}", f.display()))
            && err.contains("cargo build --release -p ferroce-ibverbs"),
        "{err}"
    );
    std::fs::remove_dir_all(&t).unwrap();
}

/// A directory with a dummy libibverbs.so.1, for the tests about the program itself.
fn dummy_libdir(name: &str) -> PathBuf {
    let t = scratch(name);
    std::fs::write(t.join("libibverbs.so.1"), b"dummy").unwrap();
    t
}

#[test]
fn exit_codes_and_signals_are_the_programs() {
    let lib = dummy_libdir("status");
    let f = Path::new(FERROCE);
    for code in [0, 1, 2, 7, 255] {
        let o = output(exec(
            f,
            Some(&lib),
            None,
            &["sh", "-c", &format!("exit {code}")],
        ));
        assert_eq!(o.status.code(), Some(code));
        assert!(
            o.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = output(exec(f, Some(&lib), None, &["sh", "-c", "kill -TERM $$"]));
    assert_eq!(o.status.signal(), Some(15), "{:?}", o.status);
}

#[test]
fn the_program_replaces_ferroce() {
    let lib = dummy_libdir("same-process");
    let mut c = exec(
        Path::new(FERROCE),
        Some(&lib),
        None,
        &["sh", "-c", "echo $$"],
    );
    let child = c.stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    assert_eq!(stdout(&o).trim(), pid.to_string());
}

#[test]
fn arguments_pass_through_untouched() {
    let lib = dummy_libdir("args");
    let o = output(exec(
        Path::new(FERROCE),
        Some(&lib),
        None,
        &["printf", "[%s]", "-d", "--help", "a b", "", "--"],
    ));
    assert_eq!(stdout(&o), "[-d][--help][a b][][--]");
}

#[test]
fn missing_program_is_one_line() {
    let lib = dummy_libdir("missing-program");
    let (code, err) = one_line_failure(&output(exec(
        Path::new(FERROCE),
        Some(&lib),
        None,
        &["no-such-program-ferroce-test"],
    )));
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot run 'no-such-program-ferroce-test'")
            && err.contains("no such program"),
        "{err}"
    );
    // Not executable.
    let (code, err) = one_line_failure(&output(exec(
        Path::new(FERROCE),
        Some(&lib),
        None,
        &[lib.join("libibverbs.so.1").to_str().unwrap()],
    )));
    assert_eq!(code, 2);
    assert!(err.contains("permission denied"), "{err}");
    // No program at all: clap's usage error.
    let o = Command::new(FERROCE).arg("exec").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// The CapAmb and CapEff lines of the program's /proc/self/status, as masks.
fn program_caps(o: &Output) -> (u64, u64) {
    let s = stdout(o);
    let mask = |name: &str| {
        let line = s
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{s}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    (mask("CapAmb:"), mask("CapEff:"))
}

#[test]
#[ignore = "needs root: setcap on a copy of ferroce, and setpriv to run it as nobody"]
fn non_root_program_keeps_cap_net_raw_from_a_setcap_ferroce() {
    const NET_RAW: u64 = 1 << 13;
    // A directory that nobody can reach, under /tmp (the target directory may be in a
    // private home directory).
    let t = std::env::temp_dir().join(format!("ferroce-exec-caps-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    std::fs::create_dir(&t).unwrap();
    std::fs::set_permissions(&t, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(t.join("libibverbs.so.1"), b"dummy").unwrap();
    let plain = t.join("ferroce-plain");
    let capped = t.join("ferroce-capped");
    std::fs::copy(FERROCE, &plain).unwrap();
    std::fs::copy(FERROCE, &capped).unwrap();
    let st = Command::new("setcap")
        .args(["cap_net_raw+p"])
        .arg(&capped)
        .status()
        .expect("setcap (Debian package libcap2-bin)");
    assert!(st.success(), "setcap failed: {st:?}");
    let as_nobody = |f: &Path| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(f)
            .args(["exec", "--", "grep", "^Cap", "/proc/self/status"])
            .env("FERROCE_LIBDIR", &t);
        output(c)
    };
    // Without the file capability the program runs with none; with it, CAP_NET_RAW is
    // ambient and effective in the program.
    let (amb, eff) = program_caps(&as_nobody(&plain));
    assert_eq!((amb, eff), (0, 0));
    let (amb, eff) = program_caps(&as_nobody(&capped));
    assert_eq!(amb, NET_RAW, "CapAmb {amb:#x}");
    assert_eq!(eff, NET_RAW, "CapEff {eff:#x}");
    std::fs::remove_dir_all(&t).unwrap();
}
