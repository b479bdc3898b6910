//! What both managers share: command-line options, the API server connection, `/healthz` + `/readyz`,
//! Prometheus `/metrics`, Events, the webhook server's options and its start on every replica, Lease-based
//! leader election, logging setup and graceful shutdown.

pub mod before_send;
pub mod controller;
pub mod duration;
pub mod events;
pub mod health;
pub mod leader;
pub mod manager;
pub mod memory;
pub mod metrics;
pub mod rate_limit;
pub mod shutdown;
pub mod telemetry;
pub mod watching;

pub use manager::{
    Manager, ManagerArgs, Serving, Shutdown, TlsArgs, VERSION, WebhookArgs, exit_code, run_manager,
    run_manager_with_webhooks,
};
