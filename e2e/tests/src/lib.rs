//! What the end-to-end scenarios share: a management plane with every CRD, both managers as processes
//! serving their webhooks, the simulator, cluster templates applied with clusterctl-style variables, and
//! an etcd observer that samples the workload cluster's member list.

pub mod env;
pub mod etcd_watch;
pub mod template;

pub use env::Env;
