//! `/healthz` (the process serves requests), `/readyz` (the manager is connected and working) and
//! `/metrics` (the process registry of [`crate::metrics`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::get;

/// Whether the manager can do its work, as `/readyz` reports it. It is ready when every part that
/// runs on this replica is: the webhook server (when enabled, on every replica) and the controllers
/// (only on the replica that runs them, the leader). A replica with neither, e.g. one waiting for
/// the Lease without webhooks, is not ready; nor is one shutting down.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<Parts>);

#[derive(Debug, Default)]
struct Parts {
    controllers: Part,
    webhooks: Part,
    stopping: AtomicBool,
}

/// Not running here, starting, or ready.
#[derive(Debug, Default)]
struct Part(AtomicU8);

const ABSENT: u8 = 0;
const STARTING: u8 = 1;
const READY: u8 = 2;

impl Part {
    fn set(&self, state: u8) {
        self.0.store(state, Ordering::Release);
    }

    fn get(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }
}

impl Readiness {
    /// Set by the controllers once they can reconcile (e.g. their CRDs exist); `false` makes the
    /// replica unready again.
    pub fn set_ready(&self, ready: bool) {
        self.0.controllers.set(if ready { READY } else { STARTING });
    }

    /// The controllers start on this replica and count from now on.
    pub(crate) fn controllers_starting(&self) {
        self.0.controllers.set(STARTING);
    }

    /// The webhook server starts on this replica and counts from now on.
    pub(crate) fn webhooks_starting(&self) {
        self.0.webhooks.set(STARTING);
    }

    /// The webhook server accepts connections.
    pub(crate) fn webhooks_ready(&self) {
        self.0.webhooks.set(READY);
    }

    /// The manager is shutting down: unready for good.
    pub(crate) fn stopping(&self) {
        self.0.stopping.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        let parts = [self.0.controllers.get(), self.0.webhooks.get()];
        !self.0.stopping.load(Ordering::Acquire)
            && parts.iter().any(|&state| state != ABSENT)
            && parts.iter().all(|&state| state != STARTING)
    }
}

pub fn router(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(readiness)
}

async fn readyz(State(readiness): State<Readiness>) -> (StatusCode, &'static str) {
    if readiness.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics() -> ([(header::HeaderName, &'static str); 1], String) {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        crate::metrics::encode(),
    )
}

/// Binds the health endpoint; fails with the address in the message when the port is taken.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr} for /healthz: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_with_nothing_running_is_not_ready() {
        assert!(!Readiness::default().is_ready());
    }

    #[test]
    fn without_webhooks_the_controllers_decide() {
        let readiness = Readiness::default();
        readiness.controllers_starting();
        assert!(!readiness.is_ready());
        readiness.set_ready(true);
        assert!(readiness.is_ready());
        readiness.set_ready(false);
        assert!(!readiness.is_ready());
    }

    #[test]
    fn webhooks_make_a_waiting_replica_ready_and_gate_the_leader() {
        let readiness = Readiness::default();
        readiness.webhooks_starting();
        assert!(!readiness.is_ready());
        readiness.webhooks_ready();
        assert!(readiness.is_ready(), "a replica serving webhooks is ready");
        readiness.controllers_starting();
        assert!(!readiness.is_ready(), "its controllers are not ready yet");
        readiness.set_ready(true);
        assert!(readiness.is_ready());
        readiness.stopping();
        assert!(!readiness.is_ready());
    }

    #[test]
    fn controllers_alone_do_not_make_a_replica_ready_before_its_webhooks() {
        let readiness = Readiness::default();
        readiness.webhooks_starting();
        readiness.controllers_starting();
        readiness.set_ready(true);
        assert!(!readiness.is_ready());
        readiness.webhooks_ready();
        assert!(readiness.is_ready());
    }
}
