//! Any text through the offline validator of both managers. Splitting the stream into documents
//! loses nothing, and every problem names the file and an existing document.

#![no_main]

use kubeadm_api::{bootstrap, controlplane};
use kubeadm_tools::validate::check_documents;
use kubeadm_tools::yaml;
use libfuzzer_sys::fuzz_target;

const FILE: &str = "fuzz.yaml";
const GROUPS: [&str; 2] = [bootstrap::GROUP, controlplane::GROUP];

fuzz_target!(|text: &str| {
    let stretches = yaml::split(text);
    assert_eq!(stretches.iter().map(|d| d.text).collect::<String>(), text);
    let documents = yaml::documents(text);
    for (i, document) in documents.iter().enumerate() {
        assert_eq!(document.number, i + 1);
    }

    let report = check_documents(FILE, text, &GROUPS);
    assert!(report.checked <= documents.len());
    for problem in report.problems.iter().chain(&report.warnings) {
        assert_eq!(problem.file, FILE);
        assert!(problem.document <= documents.len(), "{problem}");
        assert!(!problem.rule.is_empty(), "{problem:?}");
        assert!(problem.to_string().starts_with(FILE));
    }
});
