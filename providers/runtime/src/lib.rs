//! What both managers share: command-line options, the API server connection, `/healthz` + `/readyz`,
//! Prometheus `/metrics`, Lease-based leader election, logging setup, graceful shutdown, and the
//! offline `validate` command.

pub mod health;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod shutdown;
pub mod telemetry;
pub mod validate;

pub use manager::{Manager, ManagerArgs, Shutdown, exit_code, run_manager};
