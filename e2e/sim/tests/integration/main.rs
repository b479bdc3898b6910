//! Integration tests of the simulated infrastructure: CLI, CRDs, boot failures.
//!
//! One binary for all of them: every test binary links all the dependencies again, which costs
//! minutes and gigabytes on a small machine.

mod boot_failures;
mod cli;
mod crds;
