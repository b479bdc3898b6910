//! Integration tests of the build tooling: generated manifests are fresh and components are complete.
//!
//! One binary for all of them: every test binary links all the dependencies again, which costs
//! minutes and gigabytes on a small machine.

mod components;
mod crds_are_fresh;
mod reference_is_complete;
