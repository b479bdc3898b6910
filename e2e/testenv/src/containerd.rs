//! Debian's containerd as a process of a test: its own root, state and socket under a folder, the CRI
//! plugin off (nothing here is a kubelet), runc through containerd's shim. What the node images
//! ([`crate::images`]) are checked with before a node imports them: `ctr images import`, then `ctr run`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::process::Process;

/// The containerd namespace the kubelet's CRI uses: images imported there are the ones it finds.
pub const NAMESPACE: &str = "k8s.io";

const READY_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Containerd {
    process: Process,
    socket: PathBuf,
    ctr: PathBuf,
}

impl Containerd {
    /// Starts containerd with everything it keeps under `dir` (which must not be on overlayfs: the
    /// overlayfs snapshotter stacks on it) and waits until it answers.
    pub fn start(dir: &Path) -> Result<Self, Error> {
        let binary = which("containerd")?;
        let ctr = which("ctr")?;
        // containerd's shim runs it.
        which("runc")?;
        let socket = dir.join("containerd.sock");
        let config = dir.join("config.toml");
        std::fs::write(&config, render_config(dir, &socket))
            .map_err(|e| Error::io(format!("write {}", config.display()), e))?;
        let mut command = Command::new(binary);
        command.arg("--config").arg(&config);
        let mut process = Process::spawn("containerd", command, &dir.join("containerd.log"))?;
        let deadline = Instant::now() + READY_TIMEOUT;
        let containerd = loop {
            process.ensure_running()?;
            if socket.exists() {
                let answer = Command::new(&ctr)
                    .arg("--address")
                    .arg(&socket)
                    .arg("version")
                    .output()
                    .map_err(|e| Error::io("run ctr version", e))?;
                if answer.status.success() {
                    break Self {
                        process,
                        socket,
                        ctr,
                    };
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Exited {
                    what: "containerd".into(),
                    status: format!("not answering after {READY_TIMEOUT:?}"),
                    log_tail: process.log_tail(20),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        Ok(containerd)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `ctr` talking to this containerd, in [`NAMESPACE`].
    pub fn ctr(&self) -> Command {
        let mut command = Command::new(&self.ctr);
        command
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", NAMESPACE]);
        command
    }

    /// Runs `ctr` with `args`; its output, or an error with what it said.
    pub fn run_ctr(&self, args: &[&str]) -> Result<String, Error> {
        let output = self
            .ctr()
            .args(args)
            .output()
            .map_err(|e| Error::io(format!("run ctr {}", args.join(" ")), e))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if output.status.success() {
            Ok(text)
        } else {
            Err(Error::io(
                format!(
                    "ctr {} ({}): {}",
                    args.join(" "),
                    output.status,
                    text.trim()
                ),
                std::io::Error::other("ctr failed"),
            ))
        }
    }

    /// Imports an image tarball (OCI image layout) into the store.
    pub fn import(&self, tarball: &Path) -> Result<(), Error> {
        self.run_ctr(&["images", "import", &tarball.display().to_string()])
            .map(drop)
    }

    /// The references of the images in the store, sorted.
    pub fn images(&self) -> Result<Vec<String>, Error> {
        let mut list: Vec<String> = self
            .run_ctr(&["images", "list", "--quiet"])?
            .lines()
            .map(str::to_owned)
            .collect();
        list.sort();
        Ok(list)
    }

    /// Runs `args` (the command: they replace the image's entrypoint) in a new container of `image`,
    /// removed after, and returns its output. No network but loopback; its cgroup is under
    /// [`Containerd::cgroup_parent`], which [`Containerd::stop`] removes.
    pub fn run(&self, image: &str, id: &str, args: &[&str]) -> Result<String, Error> {
        let cgroup = format!("/{}/{id}", self.cgroup_parent());
        let mut all = vec!["run", "--rm", "--cgroup", &cgroup, image, id];
        all.extend_from_slice(args);
        self.run_ctr(&all)
    }

    /// The cgroup (in every hierarchy) the containers of [`Containerd::run`] are created under: one per
    /// containerd, so that removing it leaves the machine's cgroups as they were.
    pub fn cgroup_parent(&self) -> String {
        format!("testenv-containerd-{}", self.process.pid())
    }

    /// The folders of [`Containerd::cgroup_parent`] that exist, in every hierarchy.
    pub fn cgroups(&self) -> Vec<PathBuf> {
        let parent = self.cgroup_parent();
        std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .map(|hierarchy| hierarchy.path().join(&parent))
            .filter(|dir| dir.is_dir())
            .collect()
    }

    /// PIDs of containerd's shims still serving this containerd (none once every container is gone).
    pub fn shims(&self) -> Vec<u32> {
        let socket = self.socket.display().to_string();
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                (cmdline.contains("containerd-shim") && cmdline.contains(&socket)).then_some(pid)
            })
            .collect()
    }

    /// Stops containerd (SIGTERM, then SIGKILL after a grace period) and removes the (empty) cgroups its
    /// containers were under.
    pub fn stop(mut self) {
        self.process.stop();
        for dir in self.cgroups() {
            if let Err(e) = std::fs::remove_dir(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cgroup left behind");
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// containerd's configuration (version 2) for a store under `dir`: root, state and sockets there, the CRI
/// plugin off.
fn render_config(dir: &Path, socket: &Path) -> String {
    let dir = dir.display();
    let socket = socket.display();
    format!(
        "version = 2\n\
         root = \"{dir}/root\"\n\
         state = \"{dir}/state\"\n\
         # A test imports and runs images with ctr; no kubelet talks CRI to this one.\n\
         disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
         \n\
         [grpc]\n\
         \x20 address = \"{socket}\"\n\
         \n\
         [ttrpc]\n\
         \x20 address = \"{socket}.ttrpc\"\n"
    )
}

fn which(name: &str) -> Result<PathBuf, Error> {
    crate::find_program(name).ok_or_else(|| Error::MissingBinary {
        name: name.to_owned(),
        hint: "install Debian's containerd and runc: `hack/install-testenv.sh nodes`".into(),
    })
}
