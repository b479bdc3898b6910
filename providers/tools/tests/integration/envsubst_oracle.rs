//! Our substitution against the real thing: `clusterctl-envsubst` (`hack/tools/envsubst`), which is
//! clusterctl's own simple template processor of the Cluster API version the tests run (its legacy
//! `${ VAR }` rewrite, its variable listing and missing-variable check, drone/envsubst under it),
//! answers for every text; we must agree on each.
//!
//! The texts: every template of this repository and every provider template fixture, the 1,500 texts of
//! `tests/fixtures/envsubst-texts.jsonl` (crafted cases and random strings of `$`, braces, operators,
//! names, blanks), and a generated corpus of each string function with nested expressions, globs,
//! numbers, escapes and multi-byte characters, from a fixed seed. The variables: `A=x`, `B` set but
//! empty, `C` unset, `D` and `E` holding multi-byte characters and the letters whose case mappings
//! are special.
//!
//! Where clusterctl renders, we render the same bytes and list the same variables with the same defaults,
//! or refuse on purpose: a NUL in the text (clusterctl drops the rest), bytes that are not UTF-8 (a
//! substring cutting a character), a negative substring length (clusterctl panics). Where clusterctl
//! refuses, we refuse too, naming the same missing variables.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;
use kubeadm_tools::variables::Template;
use serde::Deserialize;

const VALUES: [(&str, &str); 4] = [
    ("A", "x"),
    ("B", ""),
    ("D", "Hello.wörld/ß-tar.gz"),
    ("E", "ᾀ İ ǅ ŉ Straße 10 ÄÖ"),
];

fn lookup(name: &str) -> Option<&'static str> {
    VALUES.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

#[derive(Deserialize)]
struct Answer {
    variables: Option<BTreeMap<String, Option<String>>>,
    variables_error: Option<String>,
    output: Option<String>,
    error: Option<String>,
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every template file of the repository and the provider template fixtures.
fn template_files() -> Vec<(String, String)> {
    let root = repository();
    let mut files = Vec::new();
    for dir in [
        "templates",
        "providers/controlplane/tests/fixtures/provider-templates",
        "providers/tools/tests/fixtures",
    ] {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        entries.sort();
        for path in entries {
            let text = std::fs::read_to_string(&path).unwrap();
            files.push((path.display().to_string(), text));
        }
    }
    assert!(files.len() >= 15, "{} template files", files.len());
    files
}

/// A small deterministic generator (xorshift64*), so that a failure names a case that stays put.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const NAMES: [&str; 7] = ["A", "B", "C", "D", "E", "A_1", "é"];
const FUNCTIONS: [&str; 19] = [
    "", ":=", "=", ":-", ":?", ":+", "^", "^^", ",", ",,", "#", "##", "%", "%%", ":", "/", "//",
    "/#", "/%",
];
const FRAGMENTS: [&str; 34] = [
    "x", "l", "o", ".", "*", "?", "*.", ".*", "[a-z]", "[^.]", "[", "]", "\\", "\\/", "\\\\", "/",
    "-", "1", "2", "-1", "0", "10", "99", " ", "ö", "ß", "$$", "$", "{", "}", ":", "\n", "Hello",
    "tar",
];
const TOKENS: [&str; 30] = [
    "$", "{", "}", "${", "$$", ":", "=", "-", "+", "?", "#", "%", "/", "\\", "^", ",", "*", "[",
    "]", "A", "B", "C", "D", "x", "é", " ", "\n", "0", "2", "${D",
];

/// An argument of a function: fragments, and at `depth` > 0 sometimes a nested expression.
fn argument(random: &mut Random, depth: usize) -> String {
    let mut text = String::new();
    for _ in 0..random.below(4) {
        if depth > 0 && random.below(5) == 0 {
            text.push_str(&expression(random, depth - 1));
        } else {
            text.push_str(random.pick(&FRAGMENTS));
        }
    }
    text
}

/// One `${…}` of a random function, mostly well formed.
fn expression(random: &mut Random, depth: usize) -> String {
    let name = random.pick(&NAMES);
    if random.below(12) == 0 {
        return format!("${{#{name}}}");
    }
    let function = random.pick(&FUNCTIONS);
    let body = match function {
        "" | "^" | "^^" | "," | ",," => String::new(),
        ":" => match random.below(3) {
            0 => random.pick(&["0", "1", "3", "-1", "99", "x"]).to_owned(),
            _ => format!(
                "{}:{}",
                random.pick(&["0", "1", "3", "6", "99", "x", " -2"]),
                random.pick(&["0", "1", "2", "5", "-1", "99", "y"])
            ),
        },
        "/" | "//" | "/#" | "/%" => match random.below(3) {
            0 => format!("{}/", argument(random, depth)),
            _ => format!("{}/{}", argument(random, depth), argument(random, depth)),
        },
        _ => argument(random, depth),
    };
    let close = if random.below(15) == 0 { "" } else { "}" };
    format!("${{{name}{function}{body}{close}")
}

fn generated(count: usize) -> Vec<String> {
    let mut random = Random(20_261_207);
    (0..count)
        .map(|i| {
            let mut text = String::new();
            for _ in 0..1 + random.below(4) {
                if i % 2 == 0 {
                    text.push_str(&expression(&mut random, 2));
                } else {
                    text.push_str(random.pick(&TOKENS));
                }
                if random.below(3) == 0 {
                    text.push_str(random.pick(&[" ", "-", "\n", "a: "]));
                }
            }
            text
        })
        .collect()
}

/// Every special case letter, alone in the value of a variable changed to upper and lower case.
fn case_mappings() -> Vec<String> {
    let mut texts = Vec::new();
    for c in (0..0x3_0000u32).filter_map(char::from_u32) {
        let upper = c.to_uppercase().count() > 1;
        let lower = c.to_lowercase().count() > 1;
        if upper || lower {
            texts.push(format!("{c}"));
        }
    }
    texts
}

/// Asks clusterctl-envsubst about each `(text, values)`.
fn ask(requests: &[(String, BTreeMap<String, String>)]) -> Vec<Answer> {
    let binary = testenv::binaries::clusterctl_envsubst().unwrap_or_else(|e| {
        panic!("clusterctl's template processor is needed to compare with (hack/install-testenv.sh builds it): {e}")
    });
    let mut child = Command::new(binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines: Vec<String> = requests
        .iter()
        .map(|(text, values)| serde_json::json!({"text": text, "values": values}).to_string())
        .collect();
    let writer = std::thread::spawn(move || {
        for line in lines {
            writeln!(stdin, "{line}").unwrap();
        }
    });
    let answers: Vec<Answer> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|line| serde_json::from_str(&line.unwrap()).unwrap())
        .collect();
    writer.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(answers.len(), requests.len());
    answers
}

#[derive(Default, Debug)]
struct Tally {
    rendered_alike: usize,
    missing_alike: usize,
    both_refused: usize,
    refused_on_purpose: usize,
}

/// Compares our reading of `text` with clusterctl's `answer`; panics naming the case on a difference.
fn compare(name: &str, text: &str, answer: &Answer, tally: &mut Tally) {
    let ours = Template::parse(text);
    if answer.variables_error.is_some() {
        assert!(answer.error.is_some(), "{name}: half an answer");
        assert!(
            ours.is_err(),
            "{name}: clusterctl refuses {text:?} ({}) but we read it",
            answer.error.as_deref().unwrap_or_default()
        );
        tally.both_refused += 1;
        return;
    }
    // An empty map is left out of the answer.
    let variables = &answer.variables.clone().unwrap_or_default();
    let template = match ours {
        Ok(template) => template,
        Err(error) if text.contains('\0') && error.message.contains("NUL") => {
            tally.refused_on_purpose += 1;
            return;
        }
        Err(error) => panic!("{name}: clusterctl reads {text:?} but we refuse it: {error}"),
    };
    let listed: BTreeMap<String, Option<String>> = template
        .variables()
        .into_iter()
        .map(|variable| (variable.name, variable.default))
        .collect();
    assert_eq!(&listed, variables, "{name}: the variables of {text:?}");
    let mut missing: Vec<String> = template
        .missing(lookup)
        .into_iter()
        .map(|variable| variable.name)
        .collect();
    missing.sort();
    match (&answer.error, &answer.output) {
        (Some(error), _) if error.starts_with("value for variables [") => {
            let named = error
                .trim_start_matches("value for variables [")
                .split(']')
                .next()
                .unwrap();
            assert_eq!(missing.join(", "), named, "{name}: missing in {text:?}");
            tally.missing_alike += 1;
        }
        (Some(error), _) if error.starts_with("panic: ") => {
            assert!(missing.is_empty(), "{name}: {missing:?}");
            let refusal = template.render(lookup).unwrap_err();
            assert!(
                refusal.message.contains("negative length"),
                "{name}: clusterctl crashes on {text:?} ({error}), we say {refusal}"
            );
            tally.refused_on_purpose += 1;
        }
        (Some(error), _) => panic!("{name}: clusterctl fails on {text:?} with {error}"),
        (None, output) => {
            assert!(
                missing.is_empty(),
                "{name}: we miss {missing:?} in {text:?}"
            );
            let expected = base64::engine::general_purpose::STANDARD
                .decode(output.as_deref().unwrap_or_default())
                .unwrap();
            match template.render(lookup) {
                Ok(rendered) => {
                    assert_eq!(
                        rendered.as_bytes(),
                        expected.as_slice(),
                        "{name}: {text:?} renders {rendered:?}, clusterctl {:?}",
                        String::from_utf8_lossy(&expected)
                    );
                    tally.rendered_alike += 1;
                }
                Err(refusal) => {
                    assert!(
                        std::str::from_utf8(&expected).is_err()
                            && refusal.message.contains("cuts a character"),
                        "{name}: clusterctl renders {text:?} as {:?} but we refuse it: {refusal}",
                        String::from_utf8_lossy(&expected)
                    );
                    tally.refused_on_purpose += 1;
                }
            }
        }
    }
}

#[test]
fn generate_cluster_substitutes_as_clusterctl_does() {
    let values: BTreeMap<String, String> = VALUES
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    let mut cases: Vec<(String, String)> = template_files();
    let texts = include_str!("../fixtures/envsubst-texts.jsonl");
    for (i, line) in texts.lines().enumerate() {
        let text: serde_json::Value = serde_json::from_str(line).unwrap();
        cases.push((
            format!("envsubst-texts.jsonl:{}", i + 1),
            text["text"].as_str().unwrap().to_owned(),
        ));
    }
    for (i, text) in generated(6000).into_iter().enumerate() {
        cases.push((format!("generated #{i}"), text));
    }
    // Each special letter through every case function, as the value of a variable.
    let letters = case_mappings();
    let mut requests: Vec<(String, BTreeMap<String, String>)> = cases
        .iter()
        .map(|(_, text)| (text.clone(), values.clone()))
        .collect();
    for letter in &letters {
        let text = "${L^}|${L^^}|${L,}|${L,,}".to_owned();
        requests.push((text, [("L".to_owned(), letter.clone())].into()));
    }
    let answers = ask(&requests);
    let mut tally = Tally::default();
    for ((name, text), answer) in cases.iter().zip(&answers) {
        compare(name, text, answer, &mut tally);
    }
    for (letter, answer) in letters.iter().zip(&answers[cases.len()..]) {
        let expected = base64::engine::general_purpose::STANDARD
            .decode(answer.output.as_deref().unwrap_or_default())
            .unwrap();
        let ours = Template::parse("${L^}|${L^^}|${L,}|${L,,}")
            .unwrap()
            .render(|name| (name == "L").then_some(letter.as_str()))
            .unwrap();
        assert_eq!(
            ours,
            String::from_utf8(expected).unwrap(),
            "the case mappings of {letter:?} (U+{:04X})",
            letter.chars().next().unwrap() as u32
        );
    }
    eprintln!(
        "{tally:?}, and the case mappings of {} letters",
        letters.len()
    );
    assert!(
        tally.rendered_alike > 4000,
        "the corpus must mostly render: {tally:?}"
    );
    assert!(
        tally.missing_alike > 300 && tally.both_refused > 1000 && tally.refused_on_purpose > 0,
        "the corpus must reach missing variables and refusals: {tally:?}"
    );
}

#[test]
fn every_string_function_is_in_the_generated_corpus() {
    let corpus = generated(6000).join("\n");
    for function in FUNCTIONS.iter().filter(|f| !f.is_empty()) {
        assert!(
            NAMES
                .iter()
                .any(|name| corpus.contains(&format!("${{{name}{function}"))),
            "{function}"
        );
    }
    assert!(corpus.contains("${#"));
}
