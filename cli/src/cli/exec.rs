//! `ferroce exec -- PROGRAM ARGS...`: runs an unmodified RDMA program (ibv_devices,
//! ibv_rc_pingpong, perftest's ib_write_bw, ...) on ferroce's `libibverbs.so.1`.
//!
//! The program is exec'd in place of this process, with the directory of ferroce's library
//! first on `LD_LIBRARY_PATH`, and with CAP_NET_RAW passed on as an ambient capability when
//! this process holds it in its permitted set (root, or `setcap cap_net_raw+p` on ferroce);
//! as root, in a mount namespace whose `/dev/infiniband` has a node per device (UCX needs
//! one to take a device).

use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::CliError;

/// The name programs linked against rdma-core's libibverbs look for.
const SONAME: &str = "libibverbs.so.1";
/// The name programs linked against rdma-core's librdmacm look for: the same library.
const RDMACM_SONAME: &str = "librdmacm.so.1";
/// What cargo calls the ibverbs crate's cdylib in `target/<profile>/`.
const BUILT: &str = "libibverbs.so";
/// The directory beside a cargo-built `ferroce` that holds `libibverbs.so.1` and
/// `librdmacm.so.1`, both `-> ../libibverbs.so`.
const PRIVATE_DIR: &str = "ferroce-lib";

/// `ferroce exec --help`, after the arguments.
pub const HELP: &str = "\
Runs PROGRAM in place of ferroce (same process: its exit status and signals are the
program's own) with ferroce's libibverbs.so.1 and librdmacm.so.1 first on LD_LIBRARY_PATH,
so that programs built against rdma-core's libibverbs and librdmacm (ibv_devices,
ibv_rc_pingpong, perftest's ib_write_bw, rping, ucmatose, ...) run on ferroce, with no RDMA
NIC or kernel RDMA module.

  ferroce exec -- ibv_devices
  ferroce exec -- ib_write_bw -d eth0 -x 1                (server)
  ferroce exec -- ib_write_bw -d eth0 -x 1 10.0.0.1       (client)
  ferroce exec -- rping -s -a 10.0.0.1 -v                 (rdma_cm: server)
  ferroce exec --stats -- ib_write_bw -d eth0 -x 1        (counters on stderr at the end)

Devices: one per Ethernet interface with an address, named after the interface, as
`ferroce devices` lists them (-d IFACE). GID indexes (-g, -x): `ferroce devinfo -v`; an
interface's IPv4 address is at index 1 when it also has an IPv6 link-local address.

The library: the directory $FERROCE_LIBDIR when set (it must hold libibverbs.so.1); else
libibverbs.so next to the ferroce executable (cargo's target/release or target/debug), shown
to the program as libibverbs.so.1 and librdmacm.so.1 through symlinks in ferroce-lib/ beside
it; else ../lib/ferroce/libibverbs.so.1 relative to the executable (an installed layout, with
librdmacm.so.1 a symlink to it there).

Privileges: ferroce needs CAP_NET_RAW. As root nothing is needed. Otherwise give it to the
ferroce binary once, `sudo setcap cap_net_raw+p $(which ferroce)` (again after each
rebuild): exec then raises CAP_NET_RAW into its inheritable and ambient sets, so PROGRAM
(and whatever PROGRAM runs) holds it. Without it PROGRAM still runs and fails to open a
device, saying so. A ferroce with file capabilities runs in the dynamic loader's secure
mode, which removes LD_LIBRARY_PATH (and TMPDIR, ...) from its environment: PROGRAM then
gets ferroce's library directory alone on its library path.

UCX takes a device only when /dev/infiniband/<dev_name> is a device node: as root, PROGRAM
runs in a mount namespace of its own whose /dev/infiniband holds one per ferroce device
(/dev/null under the name ferroce-IFACE); the host's /dev is left as it is. lo's device
gets one only when UCX_NET_DEVICES names it (lo:1): UCX would take another host's lo as
reachable. In the same namespace, when the kernel has no /sys/class/infiniband, one lists
each device with its network interface (DEVICE/device/net/IFACE, as under a RoCE NIC),
where rdma-core's tests look for it.";

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Print each device's counters to stderr (as `--stats` does elsewhere) when the
    /// program closes it and when it exits: sets FERROCE_STATS=1 for the library.
    #[arg(long)]
    pub stats: bool,
    /// The program to run (searched on PATH) and its arguments.
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

pub fn run(a: ExecArgs) -> Result<ExitCode, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("exec: cannot find the ferroce executable: {e}"))?;
    let dir = library_dir(std::env::var_os("FERROCE_LIBDIR"), &exe)?;
    let path = library_path(&dir, std::env::var_os("LD_LIBRARY_PATH").as_deref())?;
    if let Err(e) = pass_net_raw() {
        // Held but not passable (e.g. a securebit forbids ambient capabilities): the program
        // runs without it and the library reports the missing permission itself.
        tracing::debug!("cannot pass CAP_NET_RAW on: {e}");
    }
    let (program, args) = a
        .command
        .split_first()
        .ok_or("exec: no program given: `ferroce exec -- PROGRAM ARGS...`")?;
    let devices = ferroce::verbs::Device::list();
    let ucx_net_devices = std::env::var("UCX_NET_DEVICES").ok();
    let for_ucx: Vec<_> = devices
        .iter()
        .filter(|d| for_ucx(d.name(), d.interface().loopback, ucx_net_devices.as_deref()))
        .collect();
    match device_nodes(&for_ucx) {
        Ok(0) => {}
        Ok(n) => {
            tracing::debug!(nodes = n, "device nodes in the program's /dev/infiniband");
            // In the mount namespace device_nodes made (only when it made a node).
            let all: Vec<_> = devices.iter().collect();
            match sysfs_class(&all) {
                Ok(n) => tracing::debug!(devices = n, "in the program's /sys/class/infiniband"),
                Err(e) => tracing::debug!("no /sys/class/infiniband for the program: {e}"),
            }
        }
        // Not root (no CAP_SYS_ADMIN for a mount namespace): programs on libibverbs alone
        // run as before; UCX does not see the devices.
        Err(e) => tracing::debug!("no device nodes for the program: {e}"),
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env("LD_LIBRARY_PATH", path);
    if a.stats {
        cmd.env("FERROCE_STATS", "1");
    }
    let err = cmd.exec();
    let what = match err.kind() {
        ErrorKind::NotFound => "no such program: give a path or a program on PATH".to_string(),
        ErrorKind::PermissionDenied => "permission denied: is it an executable file?".to_string(),
        _ => err.to_string(),
    };
    Err(format!(
        "exec: cannot run '{}': {what}",
        Path::new(program).display()
    )
    .into())
}

/// The directory to put first on the program's library path: it holds `libibverbs.so.1`.
/// `libdir` is `$FERROCE_LIBDIR`, `exe` the running ferroce (an absolute path).
pub fn library_dir(libdir: Option<OsString>, exe: &Path) -> Result<PathBuf, CliError> {
    if let Some(d) = libdir.filter(|d| !d.is_empty()) {
        let d = std::path::absolute(PathBuf::from(d))
            .map_err(|e| format!("exec: bad FERROCE_LIBDIR: {e}"))?;
        if d.join(SONAME).is_file() {
            return Ok(d);
        }
        return Err(format!(
            "exec: FERROCE_LIBDIR={} holds no {SONAME}: point it at the directory of \
             ferroce's {SONAME}, or unset it to use the library next to {}",
            d.display(),
            exe.display()
        )
        .into());
    }
    let bin = exe
        .parent()
        .ok_or("exec: the ferroce executable has no directory")?;
    if bin.join(BUILT).is_file() {
        return private_dir(bin);
    }
    if let Some(installed) = bin.parent().map(|p| p.join("lib/ferroce")) {
        if installed.join(SONAME).is_file() {
            return Ok(installed);
        }
    }
    let release = if bin.ends_with("debug") {
        ""
    } else {
        " --release"
    };
    Err(format!(
        "exec: no {BUILT} next to {}: build it with `cargo build{release} -p ferroce-ibverbs` \
         (or set FERROCE_LIBDIR to a directory holding {SONAME})",
        exe.display()
    )
    .into())
}

/// `bin/ferroce-lib/`, holding the symlinks `libibverbs.so.1` and `librdmacm.so.1`, both
/// `-> ../libibverbs.so` (one library serves as both, and the loader, seeing one file,
/// loads it once): made when missing or wrong, atomically (a new symlink renamed over the
/// old one), so that programs started at the same time never see one half made.
fn private_dir(bin: &Path) -> Result<PathBuf, CliError> {
    let dir = bin.join(PRIVATE_DIR);
    let target = Path::new("..").join(BUILT);
    for name in [SONAME, RDMACM_SONAME] {
        let link = dir.join(name);
        if std::fs::read_link(&link).is_ok_and(|t| t == target) {
            continue;
        }
        let fail = |e: std::io::Error| -> CliError {
            format!(
                "exec: cannot make {} -> {}: {e}: run `ferroce exec` once as the owner of {}, \
                 or set FERROCE_LIBDIR to a directory holding {SONAME}",
                link.display(),
                target.display(),
                bin.display()
            )
            .into()
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail(e)),
        }
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp); // left by a process of the same id that died here
        std::os::unix::fs::symlink(&target, &tmp).map_err(fail)?;
        std::fs::rename(&tmp, &link).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            fail(e)
        })?;
    }
    Ok(dir)
}

/// `dir`, then the old `LD_LIBRARY_PATH` if it has anything in it (an empty entry would
/// mean the current directory).
pub fn library_path(dir: &Path, old: Option<&OsStr>) -> Result<OsString, CliError> {
    let bytes = dir.as_os_str().as_encoded_bytes();
    if bytes.contains(&b':') || bytes.contains(&b';') {
        return Err(format!(
            "exec: the library directory {} has ':' or ';' in its name, which LD_LIBRARY_PATH \
             cannot hold: set FERROCE_LIBDIR to a directory without them",
            dir.display()
        )
        .into());
    }
    let mut p = dir.as_os_str().to_owned();
    if let Some(old) = old.filter(|o| !o.is_empty()) {
        p.push(":");
        p.push(old);
    }
    Ok(p)
}

/// Where RDMA device nodes live, and where UCX looks for one per device.
const DEV_DIR: &str = "/dev/infiniband";

/// Gives the program a `/dev/infiniband` holding a node for each ferroce device.
///
/// UCX (and so Open MPI, and what else runs on it) takes an RDMA device only when
/// `/dev/infiniband/<dev_name>` is a character device it may open for reading and
/// writing: the node a kernel driver makes. ferroce has no kernel driver, and its library
/// never opens such a node. So, where this process may (CAP_SYS_ADMIN: root), the program
/// gets a mount namespace of its own, in which a fresh tmpfs on `/dev/infiniband` holds
/// `/dev/null` bound under each device's name. The host's view is untouched and the
/// namespace ends with the program and its children; only a missing `/dev/infiniband`
/// is made, empty, on the host, as a kernel RDMA module would make it. Returns the
/// number of nodes.
fn device_nodes(devices: &[&ferroce::verbs::Device]) -> Result<usize, String> {
    use nix::mount::{mount, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    if devices.is_empty() {
        return Ok(0);
    }
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
    // Mounts made from here on stay in this namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("making / private: {e}"))?;
    match std::fs::create_dir(DEV_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {DEV_DIR}: {e}")),
    }
    mount(
        Some("tmpfs"),
        DEV_DIR,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=755,size=64k"),
    )
    .map_err(|e| format!("tmpfs on {DEV_DIR}: {e}"))?;
    let mut n = 0;
    for d in devices {
        let node = Path::new(DEV_DIR).join(d.dev_name());
        std::fs::File::create(&node).map_err(|e| format!("{}: {e}", node.display()))?;
        mount(
            Some("/dev/null"),
            &node,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| format!("/dev/null on {}: {e}", node.display()))?;
        n += 1;
    }
    Ok(n)
}

/// Where a kernel RDMA stack lists its devices, and where programs look for a device's
/// network interface.
const SYS_CLASS: &str = "/sys/class";

/// Gives the program, in the mount namespace [`device_nodes`] made (never call it
/// outside one: it remounts `/sys/class`), a
/// `/sys/class/infiniband/<device>/device/net/<interface>` per ferroce device, a symlink
/// to the interface's `/sys/class/net` entry, as a RoCE NIC's PCI device has under it.
///
/// rdma-core's own test suite (pyverbs) finds a device's network interface, and so its IP
/// address, there, and skips every rdma_cm test without it. The host has no
/// `/sys/class/infiniband` (no kernel RDMA module), and sysfs takes no new directories;
/// so `/sys/class` becomes a tmpfs that holds the host's classes bound back in under
/// their own names, beside the new `infiniband`. Left alone where the kernel has the
/// class. Returns the number of devices listed.
fn sysfs_class(devices: &[&ferroce::verbs::Device]) -> Result<usize, String> {
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    let class = Path::new(SYS_CLASS);
    if class.join("infiniband").exists() || devices.is_empty() {
        return Ok(0);
    }
    let bind = |from: &Path, to: &Path| {
        mount(
            Some(from),
            to,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| format!("binding {} on {}: {e}", from.display(), to.display()))
    };
    // The host's classes, kept reachable while a tmpfs covers /sys/class (in the
    // program's own /dev/infiniband tmpfs; gone again below).
    let stage = Path::new(DEV_DIR).join(".sys-class");
    std::fs::create_dir(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
    let done = (|| {
        bind(class, &stage)?;
        mount(
            Some("tmpfs"),
            class,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV,
            Some("mode=755,size=1m"),
        )
        .map_err(|e| format!("tmpfs on {SYS_CLASS}: {e}"))?;
        let entries = std::fs::read_dir(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
        for e in entries.flatten() {
            let to = class.join(e.file_name());
            std::fs::create_dir(&to).map_err(|e| format!("{}: {e}", to.display()))?;
            bind(&e.path(), &to)?;
        }
        for d in devices {
            let net = class.join("infiniband").join(d.name()).join("device/net");
            std::fs::create_dir_all(&net).map_err(|e| format!("{}: {e}", net.display()))?;
            let iface = &d.interface().name;
            std::os::unix::fs::symlink(class.join("net").join(iface), net.join(iface))
                .map_err(|e| format!("{}: {e}", net.display()))?;
        }
        Ok(devices.len())
    })();
    let _ = umount2(&stage, MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir(&stage);
    done
}

/// Whether UCX gets a node for the device on interface `name`: every device but `lo`'s,
/// and `lo`'s too when `UCX_NET_DEVICES` (UCX's list of `DEVICE:PORT` it may use) names it.
///
/// UCX takes any two RoCE devices as able to reach each other (it compares no subnets by
/// default), and splits large messages over two of them. With `lo` offered on two hosts it
/// put a lane from one host's `lo` to the other's 127.0.0.1, which is the first host
/// itself: the QP ran out of retries and UCX aborted. Real RoCE NICs have no `lo`, and
/// between processes of one host UCX moves data through shared memory anyway.
fn for_ucx(name: &str, loopback: bool, ucx_net_devices: Option<&str>) -> bool {
    !loopback
        || ucx_net_devices.is_some_and(|list| {
            list.split(',')
                .any(|d| d.trim().split(':').next() == Some(name))
        })
}

/// Raises CAP_NET_RAW into this thread's inheritable and ambient sets when it is in the
/// permitted set, so that it survives exec of a program without file capabilities (the
/// kernel gives such a program its ambient set as permitted and effective). Returns whether
/// it did; without CAP_NET_RAW there is nothing to pass on and nothing is said.
pub fn pass_net_raw() -> Result<bool, caps::errors::CapsError> {
    use caps::{CapSet, Capability::CAP_NET_RAW};
    if !caps::has_cap(None, CapSet::Permitted, CAP_NET_RAW)? {
        return Ok(false);
    }
    // An ambient capability must be permitted and inheritable.
    caps::raise(None, CapSet::Inheritable, CAP_NET_RAW)?;
    caps::raise(None, CapSet::Ambient, CAP_NET_RAW)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::{CapSet, Capability::CAP_NET_RAW};

    /// A fresh empty directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ferroce-exec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn err(r: Result<PathBuf, CliError>) -> String {
        r.expect_err("expected an error").to_string()
    }

    #[test]
    fn library_path_puts_the_directory_first() {
        let d = Path::new("/x/ferroce-lib");
        assert_eq!(library_path(d, None).unwrap(), "/x/ferroce-lib");
        assert_eq!(
            library_path(d, Some(OsStr::new(""))).unwrap(),
            "/x/ferroce-lib"
        );
        assert_eq!(
            library_path(d, Some(OsStr::new("/a:/b"))).unwrap(),
            "/x/ferroce-lib:/a:/b"
        );
        let e = library_path(Path::new("/x:y"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("':' or ';'"), "{e}");
    }

    #[test]
    fn ferroce_libdir_comes_first_and_must_hold_the_library() {
        let t = scratch("libdir");
        let exe = t.join("bin/ferroce");
        std::fs::create_dir_all(t.join("bin")).unwrap();
        std::fs::write(t.join("bin").join(BUILT), b"built").unwrap();
        let lib = t.join("lib");
        std::fs::create_dir(&lib).unwrap();
        let e = err(library_dir(Some(lib.clone().into()), &exe));
        assert!(
            e.contains("FERROCE_LIBDIR=") && e.contains("holds no libibverbs.so.1"),
            "{e}"
        );
        std::fs::write(lib.join(SONAME), b"lib").unwrap();
        assert_eq!(library_dir(Some(lib.clone().into()), &exe).unwrap(), lib);
        // Empty means unset: the library next to the executable.
        assert_eq!(
            library_dir(Some(OsString::new()), &exe).unwrap(),
            t.join("bin").join(PRIVATE_DIR)
        );
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn built_library_gets_a_private_symlink_made_and_repaired() {
        let t = scratch("built");
        let exe = t.join("ferroce");
        let e = err(library_dir(None, &exe));
        assert!(
            e.contains("no libibverbs.so next to") && e.contains("cargo build --release"),
            "{e}"
        );
        std::fs::write(t.join(BUILT), b"built").unwrap();
        let link = t.join(PRIVATE_DIR).join(SONAME);
        for _ in 0..2 {
            // Made, then found as it is.
            assert_eq!(library_dir(None, &exe).unwrap(), t.join(PRIVATE_DIR));
            assert_eq!(
                std::fs::read_link(&link).unwrap(),
                Path::new("../libibverbs.so")
            );
            assert_eq!(std::fs::read(&link).unwrap(), b"built");
        }
        // A wrong link is replaced, and no temporary is left behind.
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("/nonexistent", &link).unwrap();
        library_dir(None, &exe).unwrap();
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../libibverbs.so")
        );
        let mut names: Vec<_> = std::fs::read_dir(t.join(PRIVATE_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, [SONAME, RDMACM_SONAME]);
        // librdmacm.so.1 is the same library.
        assert_eq!(
            std::fs::read_link(t.join(PRIVATE_DIR).join(RDMACM_SONAME)).unwrap(),
            Path::new("../libibverbs.so")
        );
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn installed_layout_and_debug_hint() {
        let t = scratch("installed");
        let exe = t.join("debug/ferroce");
        let e = err(library_dir(None, &exe));
        assert!(e.contains("`cargo build -p ferroce-ibverbs`"), "{e}");
        std::fs::create_dir_all(t.join("lib/ferroce")).unwrap();
        std::fs::write(t.join("lib/ferroce").join(SONAME), b"lib").unwrap();
        assert_eq!(library_dir(None, &exe).unwrap(), t.join("lib/ferroce"));
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn ucx_gets_lo_only_when_ucx_net_devices_names_it() {
        assert!(for_ucx("eth1", false, None));
        assert!(for_ucx("eth1", false, Some("lo:1")));
        assert!(!for_ucx("lo", true, None));
        assert!(!for_ucx("lo", true, Some("all")));
        assert!(!for_ucx("lo", true, Some("eth1:1,loop0:1")));
        assert!(for_ucx("lo", true, Some("lo:1")));
        assert!(for_ucx("lo", true, Some("eth1:1, lo:1")));
        assert!(for_ucx("lo", true, Some("lo")));
    }

    /// Capabilities belong to a thread: each check runs in its own, which ends with it.
    fn in_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn nothing_to_pass_without_cap_net_raw() {
        let (passed, ambient, inheritable) = in_thread(|| {
            // As root, give CAP_NET_RAW up first (effective before permitted: E ⊆ P).
            caps::drop(None, CapSet::Effective, CAP_NET_RAW).unwrap();
            caps::drop(None, CapSet::Permitted, CAP_NET_RAW).unwrap();
            (
                pass_net_raw().unwrap(),
                caps::has_cap(None, CapSet::Ambient, CAP_NET_RAW).unwrap(),
                caps::has_cap(None, CapSet::Inheritable, CAP_NET_RAW).unwrap(),
            )
        });
        assert!(!passed && !ambient && !inheritable);
    }

    #[test]
    #[ignore = "needs root (CAP_NET_RAW in the permitted set)"]
    fn cap_net_raw_becomes_ambient() {
        let (before, passed, ambient, inheritable) = in_thread(|| {
            let before = caps::has_cap(None, CapSet::Ambient, CAP_NET_RAW).unwrap();
            (
                before,
                pass_net_raw().unwrap(),
                caps::has_cap(None, CapSet::Ambient, CAP_NET_RAW).unwrap(),
                caps::has_cap(None, CapSet::Inheritable, CAP_NET_RAW).unwrap(),
            )
        });
        assert!(!before, "CAP_NET_RAW was ambient before the test");
        assert!(passed && ambient && inheritable);
    }
}
