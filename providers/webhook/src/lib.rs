//! HTTPS server for admission (defaulting, validation) and CRD conversion webhooks, shared by both
//! managers. Each manager registers the rules of its own kinds; the rules live beside the kinds.
//!
//! The server itself arrives with the webhook work; until then the CRDs' conversion strategy points at
//! a service that clusters do not yet run, so only v1beta2 (the storage version) is usable.
