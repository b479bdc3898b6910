//! What both managers share: command-line options, the API server connection, `/healthz` + `/readyz`,
//! logging setup and graceful shutdown.

pub mod health;
pub mod manager;
pub mod shutdown;
pub mod telemetry;

pub use manager::{ManagerArgs, Shutdown, exit_code, run_manager};
