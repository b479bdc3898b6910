//! Our substitution against the real thing. `tests/fixtures/envsubst-oracle.jsonl` holds 1500 texts
//! (crafted cases and random strings of `$`, braces, operators, names, blanks) with what clusterctl's
//! simple processor makes of them: its legacy `${ VAR }` rewrite, then drone/envsubst v2 at commit
//! 179042472c46 (the version clusterctl pins) with `A=x`, `B` set but empty and `C` unset, plus the
//! variables and defaults it lists. The file was produced by a small Go program linking that package.
//!
//! Where envsubst renders, we render the same bytes and list the same variables, or refuse on purpose
//! (string functions and the `:?`/`:+` forms envsubst documents as unsupported); where envsubst fails,
//! we fail too.

use std::collections::BTreeMap;

use kubeadm_tools::variables::Template;
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    text: String,
    output: Option<String>,
    error: Option<String>,
    variables: Option<BTreeMap<String, String>>,
}

fn lookup(name: &str) -> Option<&'static str> {
    match name {
        "A" => Some("x"),
        "B" => Some(""),
        _ => None,
    }
}

/// Messages of the refusals where envsubst would render something.
const DELIBERATE_REFUSALS: [&str; 2] = [
    "uses an envsubst string function this generator does not support",
    "lists `:?` and `:+` as unsupported",
];

#[test]
fn substitution_matches_clusterctl_on_every_oracle_case() {
    let fixture = include_str!("../fixtures/envsubst-oracle.jsonl");
    let mut compared = 0;
    let mut refused = 0;
    let mut both_failed = 0;
    for line in fixture.lines() {
        let case: Case = serde_json::from_str(line).unwrap();
        let ours = Template::parse(&case.text);
        match (&case.output, ours) {
            (Some(expected), Ok(template)) => {
                assert_eq!(&template.render(lookup), expected, "text {:?}", case.text);
                let listed: BTreeMap<String, String> = template
                    .variables()
                    .into_iter()
                    .map(|variable| (variable.name, variable.default.unwrap_or_default()))
                    .collect();
                assert_eq!(
                    Some(&listed),
                    case.variables.as_ref(),
                    "variables of {:?}",
                    case.text
                );
                compared += 1;
            }
            (Some(_), Err(error)) => {
                assert!(
                    DELIBERATE_REFUSALS
                        .iter()
                        .any(|refusal| error.message.contains(refusal)),
                    "envsubst renders {:?} but we refuse it: {error}",
                    case.text
                );
                refused += 1;
            }
            (None, Ok(template)) => panic!(
                "envsubst fails on {:?} ({}) but we render {:?}",
                case.text,
                case.error.unwrap_or_default(),
                template.render(lookup)
            ),
            (None, Err(_)) => both_failed += 1,
        }
    }
    eprintln!(
        "{compared} rendered alike, {refused} refused on purpose, {both_failed} failed in both"
    );
    assert_eq!(compared + refused + both_failed, 1500);
    // The corpus must exercise all three outcomes, mostly agreement.
    assert!(compared > 700, "{compared} rendered alike");
    assert!(
        refused > 0 && both_failed > 0,
        "{refused} refused, {both_failed} failed"
    );
}
