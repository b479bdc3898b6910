//! Build tooling, run as `cargo run -p xtask -- <command>`: [`crdgen`] writes `config/` and
//! `e2e/config/crd/` from the Rust types, [`release`] the clusterctl repository of a release. The
//! objects come from [`components`] (per provider: CRDs, RBAC from the rules each manager declares,
//! Deployment, webhook objects) and [`webhook`] (the base webhook and cert-manager files), written as
//! [`generated`] says.

pub mod components;
pub mod crdgen;
pub mod generated;
pub mod reference;
pub mod release;
pub mod webhook;
