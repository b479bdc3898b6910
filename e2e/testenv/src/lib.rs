//! Real etcd and kube-apiserver processes on loopback, for integration and end-to-end tests.
//!
//! Everything here starts real binaries (Debian's etcd 3.4, kube-apiserver built by
//! `hack/install-testenv.sh`) with throw-away TLS material, and stops them by PID when the owning value is
//! dropped — also when a test panics. Missing prerequisites fail with a message that says how to fix them.

pub mod apiserver;
pub mod binaries;
pub mod capi;
pub mod clusterctl;
pub mod containerd;
pub mod core_double;
pub mod etcd;
pub mod front;
pub mod images;
pub mod kubeadm;
pub mod management;
pub mod manager;
pub mod object_store;
pub mod pki;
pub mod ports;
pub mod probe;
pub mod process;
pub mod webhooks;

use std::path::Path;
use std::time::Duration;

pub use apiserver::KubeApiServer;
pub use binaries::EtcdRelease;
pub use etcd::{EtcdCluster, EtcdOptions};
pub use management::ManagementPlane;

/// Whether this runs in CI (`CI=true`, as `.ci/run` sets): there a test that needs a tool, a build or a
/// capability of the machine fails when it is missing, where a developer's run may say so and go on.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A test needs `what`, which is missing for `why`: in CI it fails; elsewhere it says so on stderr and
/// the caller returns (the test then proves nothing and says it).
pub fn missing(what: &str, why: &str) {
    assert!(!in_ci(), "CI=true: {what} is needed and missing: {why}");
    eprintln!("skipped: {what} is missing here ({why}); in CI this fails");
}

/// `name` on `PATH`, or in `/usr/sbin` and `/sbin` (root's tools when a test's `PATH` lacks them).
pub fn find_program(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{name} not found: {hint}")]
    MissingBinary { name: String, hint: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("certificate generation failed: {0}")]
    Pki(String),
    #[error("{what} exited early ({status}); last log lines:\n{log_tail}")]
    Exited {
        what: String,
        status: String,
        log_tail: String,
    },
    #[error("{what} could not bind its port (address already in use); last log lines:\n{log_tail}")]
    PortInUse { what: String, log_tail: String },
    #[error("{what} was not ready after {timeout:?}: {last_error}; last log lines:\n{log_tail}")]
    NotReady {
        what: String,
        timeout: Duration,
        last_error: String,
        log_tail: String,
    },
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn write_file(path: &Path, content: &[u8]) -> Result<()> {
    std::fs::write(path, content).map_err(|e| Error::io(format!("write {}", path.display()), e))
}

pub(crate) fn write_private_file(path: &Path, content: &[u8]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    write_file(path, content)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(format!("chmod {}", path.display()), e))
}

/// A timeout read from the environment (seconds), so slow machines can stretch it without a rebuild.
pub(crate) fn timeout_from_env(var: &str, default: Duration) -> Duration {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(default)
}

/// Declares each listed `async fn name(release: EtcdRelease)` of the calling test file as one test per
/// etcd release: `etcd_3_4::name` on Debian's etcd and `etcd_current::name` on the release built from
/// `hack/tools/etcd`. A difference between releases is handled by the code under test, not by the test.
#[macro_export]
macro_rules! on_every_etcd_release {
    ($($name:ident),+ $(,)?) => {
        mod etcd_3_4 {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::EtcdRelease::V3_4).await
                }
            )+
        }
        mod etcd_current {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::EtcdRelease::Current).await
                }
            )+
        }
    };
}
