//! Graceful shutdown on SIGTERM (what the kubelet sends) or SIGINT (Ctrl-C).

use tokio::signal::unix::{SignalKind, signal};

/// Resolves when the process is asked to stop.
pub async fn signalled() {
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
    }
}
