//! clusterctl variable substitution of any template with a few variables taken from the input:
//! text before the first NUL is the template, `NAME=value` lines after it the variables.
//!
//! Text without `${` has no expression: it comes back as written, except that `$$` is clusterctl's
//! escape of a literal `$` (as clusterctl's own processor does: `tests/integration/envsubst_oracle.rs`). An unset
//! variable reads as an empty one. The validator's lenient reading never fails and keeps such text
//! byte for byte.

#![no_main]

use std::collections::BTreeMap;

use kubeadm_tools::variables::{Template, substitute};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &str| {
    let (template, assignments) = input.split_once('\0').unwrap_or((input, ""));
    let variables: BTreeMap<&str, &str> = assignments
        .lines()
        .filter_map(|line| line.split_once('='))
        .take(8)
        .collect();
    let lookup = |name: &str| variables.get(name).copied();

    let substituted = substitute(template, lookup);
    if !template.contains("${") {
        assert_eq!(
            substituted.as_deref(),
            Ok(template.replace("$$", "$").as_str())
        );
    }
    if let Ok(parsed) = Template::parse(template) {
        assert_eq!(substituted, parsed.render(lookup));
        assert_eq!(parsed.render(|_| None), parsed.render(|_| Some("")));
        for missing in parsed.missing(lookup) {
            assert!(missing.is_required() && lookup(&missing.name).is_none());
        }
    } else {
        let error = substituted.expect_err("parse and substitute agree");
        assert!(
            error.line >= 1 && error.line <= template.lines().count().max(1),
            "{error}"
        );
        assert!(!error.message.is_empty());
    }

    let scanned = Template::scan(template);
    if !template.contains("${") {
        assert!(!scanned.has_variables());
        assert_eq!(scanned.render(lookup).as_deref(), Ok(template));
        assert_eq!(scanned.fill_defaults(), template);
    }
});
