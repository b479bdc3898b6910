//! End-to-end scenarios: both managers as processes, simulated machines running real etcd and kube-apiserver.
//!
//! One binary for all of them: every test binary links all the dependencies again, which costs
//! minutes and gigabytes on a small machine.

mod chaos;
mod cluster_class;
mod clusterctl;
mod clusterctl_move;
mod clusterctl_upgrade;
mod front;
mod management_restart;
mod partition;
mod quickstart;
mod real_management;
mod real_nodes;
mod restore;
mod scenarios;
mod side_by_side;
mod switch;
mod template;
mod upgrade;
