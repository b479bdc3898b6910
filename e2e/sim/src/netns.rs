//! Simulated nodes with a network of their own: each node is a network namespace holding one address of
//! a /24 in 198.18.0.0/15 (RFC 2544's benchmarking range, routed nowhere), its `eth0` a veth pair whose
//! other end sits on a bridge the simulator creates. The bridge holds the subnet's first address: the
//! simulator, the managers and the load balancers reach every node through it, and the nodes reach each
//! other and the load balancers through it, as machines on one cloud network would.
//!
//! kubeadm needs this: it refuses a loopback advertise address, and the manifests it writes listen on the
//! node's own `127.0.0.1` and on all of its interfaces, which only a node of its own can give them.
//! Creating namespaces takes root and iproute2; [`Fabric::create`] says why when it cannot.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Prefix of every name the simulator gives a namespace or an interface.
const PREFIX: &str = "kps";
/// /24 subnets of 198.18.0.0/15.
const SUBNETS: u32 = 512;
/// Node addresses are `.2` to `.254` of the subnet.
const NODES_PER_FABRIC: u32 = 253;

#[derive(Debug, thiserror::Error)]
#[error("network namespaces: {0}")]
pub struct NetnsError(String);

/// Runs `ip ARGS…`; an error carries the command and what `ip` said.
fn ip(args: &[&str]) -> Result<(), NetnsError> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        NetnsError(format!(
            "ip {}: {e} (is iproute2 installed?)",
            args.join(" ")
        ))
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NetnsError(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// One simulator's network: a bridge and the /24 behind it. Dropping it removes the bridge.
#[derive(Debug)]
pub struct Fabric {
    index: u32,
    bridge: String,
    next: AtomicU32,
}

impl Fabric {
    /// Creates the bridge of a free /24 (picked at random so that simulators side by side do not meet),
    /// after removing the namespaces and bridges a killed simulator left behind.
    pub fn create() -> Result<Self, NetnsError> {
        remove_orphaned_namespaces();
        remove_orphaned_bridges();
        use std::hash::{BuildHasher, RandomState};
        let start = RandomState::new().hash_one(std::process::id()) as u32 % SUBNETS;
        let mut last = None;
        for attempt in 0..SUBNETS {
            let index = (start + attempt) % SUBNETS;
            let bridge = format!("{PREFIX}b{index}");
            if Path::new("/sys/class/net").join(&bridge).exists() || veths_left(index) {
                continue;
            }
            let fabric = Fabric {
                index,
                bridge,
                next: AtomicU32::new(0),
            };
            match fabric.set_up() {
                Ok(()) => {
                    record_bridge(&fabric.bridge);
                    return Ok(fabric);
                }
                // Another simulator took it between the check and the creation: try the next one.
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| NetnsError("every 198.18.0.0/15 subnet is in use".into())))
    }

    fn set_up(&self) -> Result<(), NetnsError> {
        ip(&["link", "add", &self.bridge, "type", "bridge"])?;
        let gateway = format!("{}/24", self.gateway());
        ip(&["addr", "add", &gateway, "dev", &self.bridge])?;
        ip(&["link", "set", &self.bridge, "up"])
    }

    /// The bridge's address: where the load balancers listen and the nodes' default route goes.
    pub fn gateway(&self) -> Ipv4Addr {
        self.address(1)
    }

    fn address(&self, host: u32) -> Ipv4Addr {
        Ipv4Addr::new(
            198,
            18 + (self.index / 256) as u8,
            (self.index % 256) as u8,
            host as u8,
        )
    }

    /// A new node namespace with the next free address, its `eth0` on the bridge.
    pub fn node(&self) -> Result<NodeNetns, NetnsError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        if n >= NODES_PER_FABRIC {
            return Err(NetnsError(format!(
                "more than {NODES_PER_FABRIC} nodes on {}",
                self.bridge
            )));
        }
        let address = self.address(n + 2);
        let name = format!("{PREFIX}-{}-{}-{n}", std::process::id(), self.index);
        let host_end = format!("{PREFIX}v{}n{n}", self.index);
        let node_end = format!("{PREFIX}p{}n{n}", self.index);
        ip(&["netns", "add", &name])?;
        // From here on, dropping the value removes the namespace and with it the veth pair.
        let netns = NodeNetns {
            name,
            ip: address,
            host_end: host_end.clone(),
        };
        ip(&[
            "link", "add", &host_end, "type", "veth", "peer", "name", &node_end,
        ])?;
        ip(&["link", "set", &host_end, "master", &self.bridge])?;
        ip(&["link", "set", &host_end, "up"])?;
        ip(&["link", "set", &node_end, "netns", &netns.name])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["-n", netns.name.as_str()];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["link", "set", &node_end, "name", "eth0"])?;
        inside(&["addr", "add", &format!("{}/24", netns.ip), "dev", "eth0"])?;
        inside(&["link", "set", "eth0", "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        inside(&[
            "route",
            "add",
            "default",
            "via",
            &self.gateway().to_string(),
        ])?;
        Ok(netns)
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.bridge]);
        let _ = std::fs::remove_file(bridge_record(std::process::id(), &self.bridge));
    }
}

/// A node's network namespace. Dropping it removes the namespace (stop its processes first).
#[derive(Debug)]
pub struct NodeNetns {
    name: String,
    ip: Ipv4Addr,
    /// The bridge's end of the node's veth pair.
    host_end: String,
}

impl NodeNetns {
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The bridge's address on the node's subnet: its default route.
    pub fn gateway(&self) -> Ipv4Addr {
        let [a, b, c, _] = self.ip.octets();
        Ipv4Addr::new(a, b, c, 1)
    }

    /// The namespace's file, which `systemd-nspawn --network-namespace-path` and `nsenter --net` take.
    pub fn path(&self) -> std::path::PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// Cuts the node off the network (`false`) or connects it again (`true`) by taking the bridge's end
    /// of its cable down or up: a network partition. Inside, every address and route stays; connections
    /// stall rather than fail, as across a broken switch.
    pub fn set_connected(&self, connected: bool) -> Result<(), NetnsError> {
        let state = if connected { "up" } else { "down" };
        ip(&["link", "set", &self.host_end, state])
    }

    /// `program` to be run inside the namespace (`ip netns exec` replaces itself with the program, so
    /// the spawned PID is the program's).
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }
}

impl Drop for NodeNetns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Whether veths of subnet `index` are still there: a namespace outlives its deletion while the kernel
/// still holds its sockets (connections of the killed processes), and its veth pair with it.
fn veths_left(index: u32) -> bool {
    let prefixes = [format!("{PREFIX}v{index}n"), format!("{PREFIX}p{index}n")];
    std::fs::read_dir("/sys/class/net").is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            prefixes.iter().any(|p| name.starts_with(p.as_str()))
        })
    })
}

/// Namespaces named after a simulator process that is gone.
fn remove_orphaned_namespaces() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&format!("{PREFIX}-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !testenv::process::pid_alive(pid) {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

/// Where a process records each bridge it created (`<pid>-<bridge>`): a bridge belongs to no namespace and
/// outlives a killed simulator, and its name does not say whose it is.
fn bridge_records() -> std::path::PathBuf {
    testenv::binaries::cache_root().join("fabrics")
}

fn bridge_record(pid: u32, bridge: &str) -> std::path::PathBuf {
    bridge_records().join(format!("{pid}-{bridge}"))
}

fn record_bridge(bridge: &str) {
    let written = std::fs::create_dir_all(bridge_records())
        .and_then(|()| std::fs::write(bridge_record(std::process::id(), bridge), ""));
    if let Err(e) = written {
        tracing::warn!(bridge, error = %e, "could not record the bridge");
    }
}

/// Removes the bridges that processes no longer running recorded (their namespaces, and with them the
/// veths on the bridge, are gone already: [`remove_orphaned_namespaces`]).
fn remove_orphaned_bridges() {
    for entry in std::fs::read_dir(bridge_records())
        .into_iter()
        .flatten()
        .flatten()
    {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some((pid, bridge)) = file
            .split_once('-')
            .and_then(|(pid, bridge)| Some((pid.parse::<u32>().ok()?, bridge.to_owned())))
        else {
            continue;
        };
        if testenv::process::pid_alive(pid) {
            continue;
        }
        if Path::new("/sys/class/net").join(&bridge).exists() {
            tracing::warn!(%bridge, pid, "removing a bridge a dead process left");
            let _ = ip(&["link", "del", &bridge]);
        }
        let _ = std::fs::remove_file(entry.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether this machine lets the simulator create namespaces (root and iproute2).
    fn available() -> bool {
        let probe = format!("{PREFIX}-probe-{}", std::process::id());
        let ok = ip(&["netns", "add", &probe]).is_ok();
        if ok {
            let _ = ip(&["netns", "del", &probe]);
        }
        ok
    }

    #[test]
    fn nodes_reach_the_gateway_from_their_own_address_and_leave_nothing_behind() {
        if !available() {
            testenv::missing(
                "network namespaces",
                "`ip netns add` failed: not root, or no iproute2",
            );
            return;
        }
        let fabric = Fabric::create().unwrap();
        let a = fabric.node().unwrap();
        let b = fabric.node().unwrap();
        assert_ne!(a.ip(), b.ip());
        assert_eq!(a.ip().octets()[..3], fabric.gateway().octets()[..3]);
        // Each node connects to a listener on the gateway (node to node is the e2e's etcd peers).
        let listener = std::net::TcpListener::bind((fabric.gateway(), 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        for node in [&a, &b] {
            let connect = format!("exec 3<>/dev/tcp/{}/{port}", fabric.gateway());
            let status = node
                .command(Path::new("bash"))
                .args(["-c", &connect])
                .status()
                .unwrap();
            assert!(status.success(), "{} reaches the gateway", node.ip());
            let (_, peer) = listener.accept().unwrap();
            assert_eq!(
                peer.ip(),
                node.ip(),
                "the connection comes from the node's address"
            );
        }
        // Cut off, the node reaches nothing; connected again, it does.
        let reaches = |node: &NodeNetns| {
            let connect = format!("exec 3<>/dev/tcp/{}/{port}", fabric.gateway());
            node.command(Path::new("timeout"))
                .args(["2", "bash", "-c", &connect])
                .status()
                .unwrap()
                .success()
        };
        a.set_connected(false).unwrap();
        assert!(!reaches(&a), "a node cut off reaches the gateway");
        a.set_connected(true).unwrap();
        assert!(
            reaches(&a),
            "a node connected again does not reach the gateway"
        );
        let (_, peer) = listener.accept().unwrap();
        assert_eq!(peer.ip(), a.ip());
        let (name, bridge) = (a.name.clone(), fabric.bridge.clone());
        let record = bridge_record(std::process::id(), &bridge);
        assert!(record.exists(), "the bridge is recorded as this process's");
        drop((a, b, fabric));
        assert!(!Path::new("/run/netns").join(name).exists());
        assert!(!Path::new("/sys/class/net").join(bridge).exists());
        assert!(!record.exists(), "the record outlives the bridge");
    }

    /// A bridge recorded by a process that is gone is removed by the next fabric, as a killed simulator's
    /// namespaces are; a live process's stays.
    #[test]
    fn a_dead_process_s_bridge_is_removed_by_the_next_fabric() {
        if !available() {
            testenv::missing(
                "network namespaces",
                "`ip netns add` failed: not root, or no iproute2",
            );
            return;
        }
        // A process that ran and ended: its PID is not alive (unless reused at once, which the
        // assertion below would show).
        let dead = std::process::Command::new("true")
            .spawn()
            .and_then(|mut c| c.wait().map(|_| c.id()))
            .unwrap();
        let leaked = format!("{PREFIX}t{}", dead % 100_000);
        ip(&["link", "add", &leaked, "type", "bridge"]).unwrap();
        std::fs::create_dir_all(bridge_records()).unwrap();
        std::fs::write(bridge_record(dead, &leaked), "").unwrap();
        let fabric = Fabric::create().unwrap();
        let gone = !Path::new("/sys/class/net").join(&leaked).exists();
        if !gone {
            let _ = ip(&["link", "del", &leaked]);
        }
        assert!(
            gone,
            "the bridge {leaked} of the dead process {dead} is still there"
        );
        assert!(!bridge_record(dead, &leaked).exists());
        assert!(Path::new("/sys/class/net").join(&fabric.bridge).exists());
    }
}
