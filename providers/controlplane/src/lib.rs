//! Cluster API control-plane provider for kubeadm.
//!
//! The decisions (what the desired machine looks like, which machines are outdated, where to scale, whether it
//! is safe to act, which etcd membership change comes next) are pure functions over plain data in [`desired`],
//! [`up_to_date`], [`selection`], [`preflight`], [`plan`], [`etcd_membership`] and [`remediation`]; [`controller`] gathers the
//! state from the API server, asks [`plan::next_step`] and applies the one step it returns.
//! [`webhooks`] serves the admission and conversion webhooks of its kinds.

/// Field manager of every server-side apply this provider makes.
pub const FIELD_MANAGER: &str = "kubeadm-controlplane";

pub mod addons;
pub mod cluster_configuration;
pub mod controller;
pub mod desired;
pub mod endpoints;
pub mod etcd;
pub mod etcd_backup;
pub mod etcd_maintenance;
pub mod etcd_membership;
pub mod etcd_upgrade;
pub mod generation;
pub mod machine_conditions;
pub mod machines;
pub mod plan;
pub mod preflight;
pub mod preview;
pub mod remediation;
pub mod restore;
pub mod selection;
pub mod up_to_date;
pub mod webhooks;
