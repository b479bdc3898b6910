//! Integration tests of the webhook server: bodies, TLS serving, registration on a real kube-apiserver.
//!
//! One binary for all of them: every test binary links all the dependencies again, which costs
//! minutes and gigabytes on a small machine.

mod arbitrary_bodies;
mod on_apiserver;
mod server;
mod support;
