//! Real machines: a node is `systemd-nspawn -b`, systemd booting over a copy-on-write view (overlayfs) of
//! this machine's root inside the node's network namespace ([`crate::netns`]), and real cloud-init runs
//! the user-data it is handed **verbatim** from a NoCloud seed, with meta-data (instance id, hostname)
//! from the machine, as a cloud hands bootstrap data to a new VM. The node is bootstrapped when
//! `/run/cluster-api/bootstrap-success.complete` exists (Cluster API's sentinel, which our bootstrap
//! data writes last); it failed when cloud-init finished without it, and cloud-init's own result names
//! what failed.
//!
//! What the recipe needs on a machine of this kind (cgroup v1, no systemd as PID 1, root without
//! `CAP_SYS_RESOURCE`): `--register=no --keep-unit` (no host systemd to register with),
//! `SYSTEMD_NSPAWN_API_VFS_WRITABLE=1` (the kubelet writes `/proc/sys`), every capability, `/dev/kmsg`
//! and the keyring and bpf system calls (containerd and runc). This machine's own enabled services (its
//! etcd, databases, timers, gettys) are disabled in the node's view: a node image runs cloud-init and
//! containerd, not what the machine it was copied from happens to run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use testenv::process::Process;

use crate::netns::NodeNetns;

/// Cluster API's bootstrap sentinel, written by the last command of the bootstrap data.
pub const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

/// Units this machine enables that a node keeps: the container runtime. cloud-init's units (enabled
/// through `cloud-init.target.wants`) are kept as a whole.
const KEPT_UNITS: [&str; 2] = ["containerd.service", "remote-fs.target"];

/// How long a node gets to shut down after SIGTERM before it is killed with everything in it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{what} is needed for real nodes and missing: {hint}")]
    Missing { what: String, hint: String },
    #[error("node {node}: {what}: {detail}")]
    Failed {
        node: String,
        what: String,
        detail: String,
    },
}

/// What a node boots with.
pub struct NodeSpec<'a> {
    /// Its hostname (cloud-init's `local-hostname`) and the container's name.
    pub name: &'a str,
    /// cloud-init's `instance-id`: a new one is a new instance, whose modules run again.
    pub instance_id: &'a str,
    /// Where the node keeps its root's upper layer, the merged view and the console log.
    pub dir: &'a Path,
    pub netns: &'a NodeNetns,
    /// The user-data, as the bootstrap data Secret's `value` holds it.
    pub user_data: &'a str,
}

/// Where a node's bootstrap stands, as a cloud console shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// cloud-init has not finished yet.
    Running,
    /// The sentinel exists.
    Succeeded,
    /// cloud-init finished without the sentinel, or the node stopped: what cloud-init reported.
    Failed(String),
}

/// A running node. Dropping it stops it (SIGTERM to `systemd-nspawn`, which shuts systemd down; SIGKILL
/// after [`SHUTDOWN_GRACE`], which ends every process in the node's PID namespace) and unmounts its root.
pub struct NspawnNode {
    name: String,
    dir: PathBuf,
    root: PathBuf,
    nspawn: Option<Process>,
}

impl NspawnNode {
    /// Prepares the node's root and boots it; returns once `systemd-nspawn` runs (cloud-init goes on).
    pub fn boot(spec: &NodeSpec) -> Result<Self, NodeError> {
        let nspawn = which("systemd-nspawn", "Debian's systemd-container")?;
        which("cloud-init", "Debian's cloud-init")?;
        let failed = |what: &str, detail: String| NodeError::Failed {
            node: spec.name.to_owned(),
            what: what.to_owned(),
            detail,
        };
        let root = spec.dir.join("root");
        for dir in ["upper", "work", "root"] {
            std::fs::create_dir_all(spec.dir.join(dir))
                .map_err(|e| failed("create its folders", e.to_string()))?;
        }
        let options = format!(
            "lowerdir=/,upperdir={},workdir={}",
            spec.dir.join("upper").display(),
            spec.dir.join("work").display()
        );
        run(Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &options])
            .arg(&root))
        .map_err(|e| failed("mount its root", e))?;
        // From here on, dropping the value unmounts the root.
        let mut node = Self {
            name: spec.name.to_owned(),
            dir: spec.dir.to_owned(),
            root,
            nspawn: None,
        };
        node.prepare_root(spec)
            .map_err(|e| failed("prepare its root", e.to_string()))?;
        let mut command = Command::new(nspawn);
        command
            .env("SYSTEMD_NSPAWN_API_VFS_WRITABLE", "1")
            .arg("--boot")
            .arg("--directory")
            .arg(&node.root)
            .arg(format!("--machine={}", spec.name))
            .arg(format!(
                "--network-namespace-path={}",
                spec.netns.path().display()
            ))
            .args([
                "--register=no",
                "--keep-unit",
                "--capability=all",
                "--bind=/dev/kmsg",
                "--system-call-filter=@keyring bpf",
                "--console=passive",
            ]);
        let log = spec.dir.join("console.log");
        node.nspawn = Some(
            Process::spawn(&format!("node {}", spec.name), command, &log)
                .map_err(|e| failed("start systemd-nspawn", e.to_string()))?,
        );
        tracing::info!(node = spec.name, ip = %spec.netns.ip(), "node booting (systemd-nspawn)");
        Ok(node)
    }

    /// The node's view of this machine's root, made a fresh instance: its own hostname and machine id,
    /// no cloud-init state, the NoCloud seed, only the units a node runs.
    fn prepare_root(&self, spec: &NodeSpec) -> std::io::Result<()> {
        let at = |path: &str| self.root.join(path.trim_start_matches('/'));
        std::fs::write(at("/etc/hostname"), format!("{}\n", spec.name))?;
        // Empty: systemd makes a new one at boot, as on a first boot.
        std::fs::write(at("/etc/machine-id"), "")?;
        let wants = at("/etc/systemd/system");
        for entry in std::fs::read_dir(&wants)?.flatten() {
            let folder = entry.file_name().to_string_lossy().into_owned();
            if !folder.ends_with(".wants") || folder == "cloud-init.target.wants" {
                continue;
            }
            for unit in std::fs::read_dir(entry.path())?.flatten() {
                let name = unit.file_name().to_string_lossy().into_owned();
                if !KEPT_UNITS.contains(&name.as_str()) {
                    std::fs::remove_file(unit.path())?;
                }
            }
        }
        let cloud = at("/var/lib/cloud");
        if cloud.exists() {
            std::fs::remove_dir_all(&cloud)?;
        }
        let seed = cloud.join("seed/nocloud");
        std::fs::create_dir_all(&seed)?;
        std::fs::write(seed.join("user-data"), spec.user_data)?;
        std::fs::write(
            seed.join("meta-data"),
            format!(
                "instance-id: {}\nlocal-hostname: {}\n",
                spec.instance_id, spec.name
            ),
        )?;
        std::fs::write(
            at("/etc/cloud/cloud.cfg.d/99-node-datasource.cfg"),
            "# The machine's user-data and meta-data are its NoCloud seed.\ndatasource_list: [ NoCloud ]\n",
        )
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// PID of `systemd-nspawn`.
    pub fn pid(&self) -> Option<u32> {
        self.nspawn.as_ref().map(Process::pid)
    }

    /// PID (in this machine's namespace) of the node's systemd, once it runs.
    pub fn init_pid(&self) -> Option<u32> {
        let pid = self.pid()?;
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// `path` as the node sees it (its mounts included: `/run` is the node's own tmpfs).
    fn in_node(&self, path: &str) -> Option<PathBuf> {
        let init = self.init_pid()?;
        Some(PathBuf::from(format!("/proc/{init}/root")).join(path.trim_start_matches('/')))
    }

    /// Reads a file as the node sees it.
    pub fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.in_node(path)?).ok()
    }

    /// Runs `args` in the node (every namespace of its systemd).
    pub fn exec(&self, args: &[&str]) -> Result<Output, NodeError> {
        let failed = |detail: String| NodeError::Failed {
            node: self.name.clone(),
            what: format!("run {}", args.join(" ")),
            detail,
        };
        let init = self
            .init_pid()
            .ok_or_else(|| failed("the node is not running".into()))?;
        Command::new("nsenter")
            .args(["--target", &init.to_string(), "--all", "--"])
            .args(args)
            .output()
            .map_err(|e| failed(e.to_string()))
    }

    /// Where the bootstrap stands: the sentinel, else cloud-init's result once it finished (or the node
    /// stopped).
    pub fn bootstrap(&mut self) -> Bootstrap {
        if let Some(nspawn) = self.nspawn.as_mut()
            && let Some(status) = nspawn.try_exit_status()
        {
            return Bootstrap::Failed(format!(
                "the node stopped ({status}); console:\n{}",
                nspawn.log_tail(20)
            ));
        }
        if self.in_node(SENTINEL).is_some_and(|p| p.exists()) {
            return Bootstrap::Succeeded;
        }
        match self.cloud_init_errors() {
            Some(errors) if errors.is_empty() => Bootstrap::Failed(format!(
                "cloud-init finished without {SENTINEL} and reported no error"
            )),
            Some(errors) => Bootstrap::Failed(format!(
                "cloud-init finished without {SENTINEL}: {}",
                errors.join("; ")
            )),
            None => Bootstrap::Running,
        }
    }

    /// The errors cloud-init reported once it finished all its stages (`/run/cloud-init/result.json`),
    /// each naming the module that failed; `None` while it runs.
    pub fn cloud_init_errors(&self) -> Option<Vec<String>> {
        let result: serde_json::Value =
            serde_json::from_str(&self.read("/run/cloud-init/result.json")?).ok()?;
        Some(
            result["v1"]["errors"]
                .as_array()
                .map(|errors| {
                    errors
                        .iter()
                        .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        )
    }

    /// Waits until the bootstrap succeeded or failed, at most `limit`.
    pub fn wait_bootstrap(&mut self, limit: Duration) -> Bootstrap {
        let deadline = Instant::now() + limit;
        loop {
            let state = self.bootstrap();
            if state != Bootstrap::Running || Instant::now() > deadline {
                return state;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The tail of the node's console (systemd's and cloud-init's output).
    pub fn console_tail(&self, lines: usize) -> String {
        testenv::process::log_tail(&self.dir.join("console.log"), lines)
    }

    /// Stops the node and unmounts its root; its folder stays (the upper layer: what the node wrote).
    pub fn stop(&mut self) {
        if let Some(mut nspawn) = self.nspawn.take() {
            let pid = nspawn.pid();
            // SIGTERM makes systemd-nspawn shut the node's systemd down.
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let deadline = Instant::now() + SHUTDOWN_GRACE;
            while nspawn.try_exit_status().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            if nspawn.try_exit_status().is_none() {
                tracing::warn!(node = %self.name, "node did not shut down; killing it");
            }
            nspawn.kill();
        }
        if mounted(&self.root)
            && let Err(e) = run(Command::new("umount").arg(&self.root))
        {
            tracing::warn!(node = %self.name, error = %e, "root still busy; detaching it");
            let _ = run(Command::new("umount").arg("--lazy").arg(&self.root));
        }
    }

    /// The node's root folder (the merged view; mounted while the node exists).
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for NspawnNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether something is mounted at `path`.
pub fn mounted(path: &Path) -> bool {
    let path = path.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|line| line.split_whitespace().nth(4) == Some(path.as_str()))
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command.output().map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn which(name: &str, package: &str) -> Result<PathBuf, NodeError> {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| NodeError::Missing {
            what: name.to_owned(),
            hint: format!("install {package} (`hack/install-testenv.sh` does)"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::Fabric;

    /// Real cloud-init in real nodes: the user-data is run verbatim (a jinja template rendered with the
    /// meta-data the machine gave, files written, commands run in the node's network namespace); the
    /// sentinel makes it a success, its absence after cloud-init finished a failure naming what failed;
    /// only the units a node runs are enabled; nothing is left after the nodes stop.
    #[test]
    fn nodes_run_their_user_data_with_real_cloud_init_and_leave_nothing_behind() {
        let fabric = match Fabric::create() {
            Ok(fabric) => fabric,
            Err(e) => {
                testenv::missing("network namespaces", &e.to_string());
                return;
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let good_netns = fabric.node().unwrap();
        let bad_netns = fabric.node().unwrap();
        let good_data = format!(
            "## template: jinja\n#cloud-config\n\
             write_files:\n\
             - path: /etc/node-facts/hostname\n  content: \"{{{{ ds.meta_data.local_hostname }}}}\"\n\
             runcmd:\n\
             - [sh, -c, 'ip -4 -o addr show dev eth0 > /run/address']\n\
             - mkdir -p /run/cluster-api\n\
             - touch {SENTINEL}\n"
        );
        // As our bootstrap data ends: the sentinel only when the last command succeeds.
        let bad_data = "#cloud-config\nruncmd:\n- touch /run/not-the-sentinel\n- [sh, -c, 'exit 3 && touch /run/cluster-api/bootstrap-success.complete']\n";
        let boot = |name: &str, netns, user_data| {
            NspawnNode::boot(&NodeSpec {
                name,
                instance_id: &format!("sim://{name}"),
                dir: &dir.path().join(name),
                netns,
                user_data,
            })
        };
        let mut good = match boot("node-good", &good_netns, &good_data) {
            Ok(node) => node,
            Err(e @ NodeError::Missing { .. }) => {
                testenv::missing("systemd-nspawn or cloud-init", &e.to_string());
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let mut bad = boot("node-bad", &bad_netns, bad_data).unwrap();

        let state = good.wait_bootstrap(Duration::from_secs(120));
        assert_eq!(
            state,
            Bootstrap::Succeeded,
            "console:\n{}",
            good.console_tail(40)
        );
        assert_eq!(
            good.read("/etc/node-facts/hostname").as_deref(),
            Some("node-good")
        );
        let address = good.read("/run/address").unwrap_or_default();
        assert!(
            address.contains(&format!("inet {}/", good_netns.ip())),
            "{address}"
        );
        // The machine's own services are not the node's.
        let enabled = good
            .exec(&["ls", "/etc/systemd/system/multi-user.target.wants"])
            .unwrap();
        for unit in String::from_utf8_lossy(&enabled.stdout).split_whitespace() {
            assert!(KEPT_UNITS.contains(&unit), "the node enables {unit}");
        }

        match bad.wait_bootstrap(Duration::from_secs(120)) {
            Bootstrap::Failed(why) => assert!(why.contains("scripts-user"), "{why}"),
            other => panic!("{other:?}; console:\n{}", bad.console_tail(40)),
        }
        assert!(bad.read("/run/not-the-sentinel").is_some(), "runcmd ran");

        let pids: Vec<u32> = [&good, &bad].iter().filter_map(|n| n.pid()).collect();
        let roots = [good.root().to_owned(), bad.root().to_owned()];
        drop((good, bad));
        for pid in pids {
            assert!(
                !testenv::process::pid_alive(pid),
                "systemd-nspawn {pid} runs"
            );
        }
        for root in roots {
            assert!(!mounted(&root), "{} is still mounted", root.display());
        }
        drop((good_netns, bad_netns, fabric));
    }
}
