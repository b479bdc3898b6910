//! Simulated infrastructure for end-to-end tests: machines are simulated, the rest is real.
//!
//! An infrastructure provider for the `SimCluster`/`SimMachine`/`SimMachineTemplate` kinds plus a
//! stand-in for core Cluster API's Cluster, Machine, MachineSet and MachineDeployment controllers. A
//! machine boots by reading its real bootstrap secret ([`node`]). Where the current kubeadm is built and
//! network namespaces can be created, each node gets a namespace of its own ([`netns`]) and runs real
//! kubeadm's phases, then etcd and kube-apiserver from the manifests kubeadm wrote ([`real_kubeadm`],
//! [`kubelet`]); otherwise (the fallback releases, or `SIM_KUBEADM=imitate`) the node imitates kubeadm
//! with the same real processes on a loopback address of its own. Each cluster's control-plane endpoint
//! is a TCP load balancer in front of the live nodes' API servers ([`network`]).
//! A SimCluster with `spec.nodes: Real` gets real nodes instead ([`real_node`]): systemd-nspawn machines that
//! boot the bootstrap data with real cloud-init, containerd and kubelet ([`nspawn`]).
//! Faults are injected by annotation ([`faults`]). Dropping a [`Sim`] stops every process it started.

pub mod api;
pub mod cloud_config;
pub mod controller;
pub mod faults;
pub mod kubeadm_config;
pub mod kubelet;
pub mod netns;
pub mod network;
pub mod node;
pub mod nspawn;
pub mod real_kubeadm;
pub mod real_node;

pub use controller::{NodeInfo, RealNodeLook, Sim, SimOptions, SimView};
