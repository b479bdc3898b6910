//! `files[].contentFormat: Template` against Go's own text/template (`hack/tools/cmd/go-template`, the
//! engine Cluster API renders these files with): every template below renders to the same bytes, or fails
//! in both, at the same stage (parse or execute), with and without a control-plane version.

use std::io::Write;
use std::process::{Command, Stdio};

use kubeadm_api::bootstrap::file_template::{self, FileTemplateError};

/// What a render came to: the output, or the stage that refused the template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Rendered(String),
    ParseError,
    ExecuteError,
}

fn go(template: &str, version: Option<&str>) -> Outcome {
    let tool = testenv::binaries::go_template().unwrap_or_else(|e| panic!("{e}"));
    let mut command = Command::new(tool);
    if let Some(version) = version {
        command.args(["--control-plane-version", version]);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("go-template runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(template.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Outcome::Rendered(String::from_utf8(out.stdout).unwrap()),
        Some(1) if stderr.starts_with("parse: ") => Outcome::ParseError,
        Some(1) if stderr.starts_with("execute: ") => Outcome::ExecuteError,
        other => panic!("go-template exited {other:?}: {stderr}"),
    }
}

fn ours(template: &str, version: Option<&str>) -> Outcome {
    match file_template::render(template, version) {
        Ok(text) => Outcome::Rendered(text),
        Err(FileTemplateError::Parse(_)) => Outcome::ParseError,
        Err(FileTemplateError::Execute(_)) => Outcome::ExecuteError,
        Err(FileTemplateError::TooLarge) => panic!("{template:?} renders past the output limit"),
    }
}

/// What users write in bootstrap files, and the rest of text/template's grammar and builtins.
const TEMPLATES: &[&str] = &[
    "v={{ .controlPlane.version }}",
    "{{ if .controlPlane }}KUBEADM_VERSION={{ .controlPlane.version }}\n{{ end }}",
    "{{ if .controlPlane }}known{{ else }}unknown{{ end }}",
    "#!/bin/bash\n{{- with .controlPlane }}\ncurl -LO https://dl.k8s.io/release/{{ .version }}/bin/linux/amd64/kubeadm\n{{- end }}\n",
    "{{ with $cp := .controlPlane }}{{ $cp.version }}{{ else with .missing }}no{{ else }}none{{ end }}",
    "{{ $v := .controlPlane.version }}{{ $v }} {{ $v = \"changed\" }}{{ $v }}",
    "{{ .controlPlane.version | printf \"%q\" }}",
    "{{ printf \"%s-%d-%05.1f-%x-%t-%v\" .controlPlane.version 3 2.5 255 true .controlPlane }}",
    "{{ printf \"%8s|%-8s|\" \"a\" \"b\" }}",
    "{{ len .controlPlane.version }} {{ len .controlPlane }}",
    "{{ index .controlPlane \"version\" }}",
    "{{ slice .controlPlane.version 1 }} {{ slice .controlPlane.version 1 5 }}",
    "{{ if eq .controlPlane.version \"v1.35.0\" \"v1.36.0\" }}listed{{ else }}other{{ end }}",
    "{{ if and .controlPlane (ne .controlPlane.version \"\") }}set{{ end }}",
    "{{ or .missing \"default\" }} {{ and 1 0 2 }} {{ not .controlPlane }}",
    "{{ lt 1 2 }} {{ le 2 2 }} {{ gt \"b\" \"a\" }} {{ ge 1.5 2.5 }}",
    "{{ range $k, $v := .controlPlane }}{{ $k }}={{ $v }};{{ end }}",
    "{{ range .controlPlane }}{{ . }}{{ else }}empty{{ end }}",
    "{{ range $i := 3 }}{{ $i }}{{ end }}",
    "{{ range 5 }}{{ if eq . 1 }}{{ continue }}{{ end }}{{ if eq . 3 }}{{ break }}{{ end }}{{ . }}{{ end }}",
    "{{/* a comment */}}text{{- /* trimmed */ -}}  more",
    "a  {{- \"b\" -}}  c",
    "{{ \"{{\" }} ds.meta_data.local_hostname {{ \"}}\" }}",
    "{{ `raw\\n` }}{{ \"escaped\\n\" }}{{ 'x' }}{{ 0x1F }}{{ 1e3 }}{{ -7 }}",
    "{{ define \"v\" }}[{{ . }}]{{ end }}{{ template \"v\" .controlPlane.version }}",
    "{{ block \"b\" .controlPlane }}{{ .version }}{{ end }}",
    "{{ html \"<a href='x'>&</a>\" }} {{ js \"it's \\\"q\\\"\" }} {{ urlquery \"a b&c\" }}",
    "{{ print 1 2 \"a\" \"b\" 3 }}|{{ println \"x\" 1 }}|",
    "{{ .controlPlane.version }}",
    "{{ .missing }} {{ .missing.deeper }}",
    "{{ $ }}",
    "{{ . }}",
    "{{ call .controlPlane }}",
    "plain text, no actions\n",
    // Go's parse-time rules, on both sides of the line.
    "{{ with $v := .controlPlane }}{{ else }}{{ $v }}{{ end }}{{ $w := 2 }}{{ $w }}",
    "{{ if $x := 1 }}{{ $y := 2 }}{{ $x }}{{ $y }}{{ end }}",
    "{{ if $x := 0 }}{{ else if $y := 3 }}{{ $x }}{{ $y }}{{ end }}",
    "{{ range $i, $e := .controlPlane }}{{ $i }}{{ end }}{{ $i }}",
    "{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}",
    "{{ $z = 1 }}",
    "{{ ($p := 5) }}{{ $p }}",
    "{{ range 3 }}{{ range 2 }}{{ break }}{{ end }}{{ continue }}{{ end }}done",
    "{{ range 3 }}{{ else }}{{ break }}{{ end }}",
    "{{ range 2 }}{{ with . }}{{ break }}{{ end }}{{ end }}x",
    "{{ $v := 1 }}{{ define \"d\" }}{{ $v }}{{ end }}",
    "{{ define \"d\" }}{{ $ }}{{ end }}{{ template \"d\" 7 }}",
    "{{ block \"b\" 2 }}{{ $q := . }}{{ $q }}{{ end }}{{ $q }}",
    "{{ with 1 }}a{{ else with 2 }}b{{ else }}c{{ end }}",
    "{{ if 1 }}{{ else }}{{ else }}{{ end }}",
    "{{ with 1 }}{{ end }}{{ end }}",
    "{{ define \"a\" }}{{ end }}{{ define \"a\" }}x{{ end }}{{ template \"a\" }}",
    "{{ if }}{{ end }}",
    "{{ 3 4 }}",
    "{{ .controlPlane.version.x }}",
    "{{ nil }}",
    "{{ printf \"%s\" nil }}",
    "{{ (.controlPlane).version }}",
    "{{ \"unterminated }}",
    "{{ /* bad comment */ }}",
    "",
    // Refused at parse time.
    "{{ .controlPlane.version ",
    "{{ end }}",
    "{{ if .controlPlane }}unterminated",
    "{{ nosuchfunc }}",
    "{{ $undefined }}",
    "{{ break }}",
    "{{ ds.meta_data.local_hostname }}",
    // Refused at execution time.
    "{{ range .controlPlane.version }}{{ end }}",
    "{{ index .controlPlane.version 99 }}",
    "{{ template \"nope\" }}",
    "{{ len 3 }}",
    "{{ printf \"%d\" }}{{ slice .controlPlane.version 9 1 }}",
    "{{ eq .controlPlane 1 }}",
    "{{ lt 1 \"a\" }}",
];

/// Where we knowingly differ (see `kubeadm_api::bootstrap::file_template`): Go's outcome, then ours.
fn known_difference(template: &str) -> Option<(Outcome, Outcome)> {
    match template {
        // Refused when parsed, not when executed: the webhook tells the user at once.
        "{{ $z = 1 }}" => Some((Outcome::ExecuteError, Outcome::ParseError)),
        // gotmpl cannot parse a declaration inside parentheses.
        "{{ ($p := 5) }}{{ $p }}" => Some((Outcome::Rendered("55".into()), Outcome::ParseError)),
        // gotmpl takes a comment after a space for a comment.
        "{{ /* bad comment */ }}" => Some((Outcome::ParseError, Outcome::Rendered(String::new()))),
        _ => None,
    }
}

#[test]
fn renders_as_go_does() {
    let mut differences = Vec::new();
    for version in [Some("v1.35.0"), None] {
        for template in TEMPLATES {
            let (go, ours) = (go(template, version), ours(template, version));
            let expected = known_difference(template).unwrap_or_else(|| (go.clone(), go.clone()));
            // A known difference must stay as documented: a change in either engine shows here.
            if (go.clone(), ours.clone()) != expected {
                differences.push(format!(
                    "{template:?} (version {version:?}):\n  Go:   {go:?}\n  ours: {ours:?}"
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} renders differ from Go's text/template:\n{}",
        differences.len(),
        TEMPLATES.len() * 2,
        differences.join("\n")
    );
}
