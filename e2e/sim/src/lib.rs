//! Simulated infrastructure for end-to-end tests: machines are simulated, the rest is real.
//!
//! An infrastructure provider for the `SimCluster`/`SimMachine`/`SimMachineTemplate` kinds plus a
//! stand-in for core Cluster API's Cluster, Machine, MachineSet and MachineDeployment controllers. A
//! machine "boots" by reading its real bootstrap secret and doing what kubeadm would do on the node, with
//! real etcd and kube-apiserver processes on the node's own loopback address ([`node`]). Each cluster's
//! control-plane endpoint is a TCP load balancer in front of the live nodes' API servers ([`network`]).
//! Faults are injected by annotation ([`faults`]). Dropping a [`Sim`] stops every process it started.

pub mod api;
pub mod cloud_config;
pub mod controller;
pub mod faults;
pub mod kubeadm_config;
pub mod network;
pub mod node;

pub use controller::{NodeInfo, Sim, SimOptions, SimView};
