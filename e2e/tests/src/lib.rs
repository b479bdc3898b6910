//! What the end-to-end scenarios share: a management plane with every CRD, both managers as processes
//! serving their webhooks, the simulator, cluster templates rendered as `controlplane-manager generate
//! cluster` renders them, an etcd observer that samples the workload cluster's member list, a control plane backed up to a
//! test object store, the seeded crash trials of the chaos test and `make soak`, and where a real node's boot goes (`make bench-real`).

pub mod api_probe;
pub mod backup;
pub mod boot_timeline;
pub mod chaos;
pub mod env;
pub mod etcd_watch;
pub mod installed;
pub mod replacements;

pub use env::Env;
