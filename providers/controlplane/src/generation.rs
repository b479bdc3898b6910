//! The machine generation: a short, stable name for the desired state of a control plane, put on every
//! Machine as [`kubeadm_api::meta::MACHINE_GENERATION_LABEL`] so `kubectl get machines -L …` shows which
//! machines a rollout has reached.
//!
//! Sovereign Cloud Stack names the control-plane infrastructure template
//! `${PREFIX}-${CLUSTER_NAME}-control-plane-${CONTROL_PLANE_MACHINE_GEN}` and bumps the counter (`genc01` →
//! `genc02`) to roll the machines; when the template name ends in such a counter, the counter is the
//! generation. Otherwise the generation is a hash of the desired state.

use serde::Serialize;

/// Longest counter suffix taken as a generation; longer suffixes are names, not counters.
const MAX_COUNTER_LEN: usize = 16;

/// The generation counter a template name ends with: the part after the last `-` when it is `gen`, optional
/// ASCII letters, then digits (`genc02`, `genw1`, `gen7`).
pub fn counter_suffix(template_name: &str) -> Option<&str> {
    let suffix = template_name.rsplit('-').next()?;
    let rest = suffix.strip_prefix("gen")?;
    let digits = rest.trim_start_matches(|c: char| c.is_ascii_lowercase());
    let is_counter = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && suffix.len() <= MAX_COUNTER_LEN;
    is_counter.then_some(suffix)
}

/// The machine generation of a desired state: the template's counter when its name has one, else `h` and
/// twelve hex digits of the SHA-256 of `desired` (serialized as JSON, which is stable for our types).
pub fn machine_generation(template_name: &str, desired: &impl Serialize) -> String {
    if let Some(counter) = counter_suffix(template_name) {
        return counter.to_owned();
    }
    let json = serde_json::to_vec(desired).expect("desired state serializes to JSON");
    let digest = ring::digest::digest(&ring::digest::SHA256, &json);
    let hex: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("h{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scs_counters_are_generations() {
        for (name, counter) in [
            ("scs-prod-control-plane-genc02", Some("genc02")),
            ("prod-md-0-genw01", Some("genw01")),
            ("cp-gen7", Some("gen7")),
            ("genc03", Some("genc03")),
            ("control-plane-v2", None),
            ("control-plane-gen", None),
            ("control-plane-genc", None),
            ("control-plane-genC02", None),
            ("control-plane-genc02x", None),
            ("control-plane-general", None),
            ("control-plane-gen00000000000000000001", None),
        ] {
            assert_eq!(counter_suffix(name), counter, "{name}");
        }
    }

    #[test]
    fn without_a_counter_the_generation_is_a_stable_hash_of_the_desired_state() {
        let a = machine_generation("control-plane", &("v1.33.1", "cp-template"));
        assert_eq!(
            a,
            machine_generation("control-plane", &("v1.33.1", "cp-template"))
        );
        assert_ne!(
            a,
            machine_generation("control-plane", &("v1.33.2", "cp-template"))
        );
        assert_eq!(a.len(), 13);
        assert!(a.starts_with('h'));
        assert!(a[1..].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn a_counter_wins_over_the_hash() {
        assert_eq!(machine_generation("x-genc02", &"anything"), "genc02");
    }
}
