//! Integration tests of the control-plane provider: the controller on a real kube-apiserver, etcd on real etcd, templates, RBAC.
//!
//! One binary for all of them: every test binary links all the dependencies again, which costs
//! minutes and gigabytes on a small machine.

mod cli_generate;
mod cli_validate;
mod common;
mod controller_on_apiserver;
mod deployment_args;
mod etcd_backup;
mod etcd_faults;
mod etcd_lifecycle;
mod etcd_on_real_etcd;
mod etcd_restore;
mod manager_lifecycle;
mod provider_templates;
mod rbac_on_apiserver;
mod webhooks_on_apiserver;
