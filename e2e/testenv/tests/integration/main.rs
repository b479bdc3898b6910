//! Integration tests of the test environment: real processes and Cluster API's core manager.
//!
//! One binary for all of them: every test binary links all the dependencies again, which costs
//! minutes and gigabytes on a small machine.

mod cluster_api;
mod node_images;
mod real_processes;
