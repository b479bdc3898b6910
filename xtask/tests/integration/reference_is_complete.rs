//! The generated reference pages list every label, annotation, condition type, reason and Event the
//! API crate names: a constant added without a row in `kubeadm_api::reference` (or an Event left out
//! of its provider's `ALL`) fails here. That the pages on disk are current is checked with the other
//! generated files (`crds_are_fresh`).

use std::path::Path;

fn source(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../providers/api/src");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `(NAME, value)` of every `pub const NAME: &str = "value";` in `text` (the value may be on the next
/// line).
fn string_constants(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("pub const ") {
        rest = &rest[start + "pub const ".len()..];
        let Some((name, after)) = rest.split_once(": &str =") else {
            continue;
        };
        if name.contains(char::is_whitespace) {
            continue;
        }
        let after = after.trim_start();
        let Some(value) = after.strip_prefix('"').and_then(|v| v.split_once('"')) else {
            continue;
        };
        found.push((name.to_owned(), value.0.to_owned()));
    }
    found
}

fn page(name: &str) -> String {
    xtask::reference::files()
        .into_iter()
        .find(|(path, _)| path.ends_with(name))
        .map(|(_, text)| text)
        .unwrap_or_else(|| panic!("no generated page {name}"))
}

#[test]
fn every_label_and_annotation_constant_has_a_row() {
    let page = page("annotations.md");
    let constants = string_constants(&source("meta.rs"));
    assert!(constants.len() > 30, "{constants:?}");
    let missing: Vec<_> = constants
        .iter()
        .filter(|(_, value)| !page.contains(&format!("`{value}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in kubeadm_api::reference::KEYS: {missing:?}"
    );
}

#[test]
fn every_condition_type_and_reason_has_a_row() {
    let page = page("conditions-and-events.md");
    for file in ["controlplane/conditions.rs", "bootstrap/conditions.rs"] {
        let constants = string_constants(&source(file));
        assert!(constants.len() > 10, "{file}: {constants:?}");
        let missing: Vec<_> = constants
            .iter()
            .filter(|(_, value)| !page.contains(&format!("`{value}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "{file}: not in the reference's condition tables: {missing:?}"
        );
    }
}

#[test]
fn every_event_is_in_its_providers_list() {
    use kubeadm_api::{bootstrap, controlplane};
    for (file, all) in [
        ("controlplane/events.rs", controlplane::events::ALL),
        ("bootstrap/events.rs", bootstrap::events::ALL),
    ] {
        let declared = source(file)
            .matches(": EventReason = EventReason {")
            .count();
        assert_eq!(declared, all.len(), "{file}: an Event is missing from ALL");
        let mut reasons: Vec<_> = all.iter().map(|e| e.reason).collect();
        reasons.sort();
        reasons.dedup();
        assert_eq!(reasons.len(), all.len(), "{file}: a reason is listed twice");
    }
    let page = page("conditions-and-events.md");
    for event in controlplane::events::ALL
        .iter()
        .chain(bootstrap::events::ALL)
        .chain(bootstrap::events::FAILURES)
    {
        assert!(
            page.contains(&format!("| `{}` |", event.reason)),
            "{event:?}"
        );
    }
}
