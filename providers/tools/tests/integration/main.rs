//! Integration tests of the offline tools: template generation, `${VAR}` substitution against envsubst, validation fuzz.
//!
//! One binary for all of them: every test binary links all the dependencies again, which costs
//! minutes and gigabytes on a small machine.

mod cluster_template;
mod envsubst_oracle;
mod validate_fuzz;
