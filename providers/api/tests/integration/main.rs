//! Integration tests of the API crate: conversion, CRDs on a real kube-apiserver, the book's links.
//!
//! One binary for all of them: every test binary links all the dependencies again, which costs
//! minutes and gigabytes on a small machine.

mod conversion;
mod crds_on_apiserver;
mod docs_links;
