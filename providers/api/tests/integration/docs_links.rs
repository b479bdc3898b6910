//! The documentation stays whole: the README is short and points into the book, every page of the book
//! is in its table of contents, and every relative link (and its `#anchor`, for Markdown targets) between
//! the README, CONTRIBUTING.md and the book resolves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// The README is the front page: details belong in the book.
const README_MAX_LINES: usize = 120;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn book_src() -> PathBuf {
    root().join("docs/src")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `.md` file under `dir`, recursively.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The lines of a Markdown text outside fenced code blocks, with their line numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(marker)) => fence = Some(marker),
            (Some(open), Some(marker)) if open == marker => fence = None,
            (Some(_), _) => {}
            (None, None) => lines.push((index + 1, line)),
        }
    }
    lines
}

/// A line without its inline code spans (`` `like this` ``), which may hold `](` that is not a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        match after.find(&closing) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links `[text](target)` (and images) of a Markdown text, with their line
/// numbers; a title (`(target "title")`) and angle brackets (`(<target>)`) are dropped.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut targets = Vec::new();
    for (number, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else {
                break;
            };
            let target = after[..end].trim();
            let target = target.split_whitespace().next().unwrap_or_default();
            let target = target.trim_start_matches('<').trim_end_matches('>');
            targets.push((number, target.to_owned()));
            rest = &after[end + 1..];
        }
    }
    targets
}

fn is_external(target: &str) -> bool {
    let lower = target.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("mailto:")
}

/// `base/relative` with `.` and `..` resolved, without touching the file system.
fn join_normalized(base: &Path, relative: &str) -> PathBuf {
    let mut path = PathBuf::new();
    for component in base.join(relative).components() {
        match component {
            Component::ParentDir => {
                if !path.pop() {
                    path.push("..");
                }
            }
            Component::CurDir => {}
            other => path.push(other),
        }
    }
    path
}

/// The anchor GitHub and mdBook give a heading: lower case, letters, digits, `-` and `_` kept, spaces
/// turned into `-`, everything else (punctuation, backticks) dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_lowercase().next().unwrap_or(c)),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings; a repeated heading gets `-1`, `-2`, … as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let trimmed = line.trim_start();
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        if level == 0 || level > 6 || !trimmed[level..].starts_with(' ') {
            continue;
        }
        let heading = trimmed[level..].trim().trim_end_matches('#').trim();
        let base = slug(heading);
        let count = seen.entry(base.clone()).or_default();
        let anchor = if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        };
        *count += 1;
        anchors.insert(anchor);
    }
    anchors
}

/// The Markdown files whose links are checked: the README, CONTRIBUTING.md and every page of the book.
fn checked_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("CONTRIBUTING.md")];
    files.extend(markdown_files(&book_src()));
    files
}

/// The pages `SUMMARY.md` lists, relative to `docs/src`.
fn summary_entries() -> Vec<(usize, String)> {
    link_targets(&read(&book_src().join("SUMMARY.md")))
        .into_iter()
        .filter(|(_, target)| !target.is_empty() && !is_external(target))
        .collect()
}

#[test]
fn the_readme_stays_short() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, at most {README_MAX_LINES}: move details into the book (docs/src)"
    );
}

#[test]
fn every_page_in_the_summary_exists() {
    let entries = summary_entries();
    assert!(!entries.is_empty(), "docs/src/SUMMARY.md lists no pages");
    let missing: Vec<String> = entries
        .iter()
        .filter(|(_, page)| !book_src().join(page).is_file())
        .map(|(line, page)| format!("docs/src/SUMMARY.md:{line}: {page}"))
        .collect();
    assert!(
        missing.is_empty(),
        "pages listed in SUMMARY.md that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_page_of_the_book_is_in_the_summary() {
    let src = book_src();
    let listed: BTreeSet<PathBuf> = summary_entries()
        .into_iter()
        .map(|(_, page)| join_normalized(&src, page.split('#').next().unwrap_or_default()))
        .collect();
    let unlisted: Vec<String> = markdown_files(&src)
        .into_iter()
        .filter(|page| page.file_name().is_none_or(|name| name != "SUMMARY.md"))
        .filter(|page| !listed.contains(&join_normalized(page, "")))
        .map(|page| {
            page.strip_prefix(&src)
                .unwrap_or(&page)
                .display()
                .to_string()
        })
        .collect();
    assert!(
        unlisted.is_empty(),
        "pages under docs/src missing from SUMMARY.md (mdBook would not build them):\n{}",
        unlisted.join("\n")
    );
}

#[test]
fn every_relative_link_resolves() {
    let root = root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in checked_files() {
        let text = read(&file);
        let dir = file.parent().expect("a file has a folder");
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (line, target) in link_targets(&text) {
            if target.is_empty() || target.starts_with('#') || is_external(&target) {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = join_normalized(dir, path);
            if !resolved.exists() {
                broken.push(format!("{shown}:{line}: {target}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor
                && resolved.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&resolved)).contains(anchor)
            {
                broken.push(format!(
                    "{shown}:{line}: {target}: no heading with anchor #{anchor}"
                ));
            }
        }
    }
    assert!(
        checked > 0,
        "no relative links found; is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn links_and_anchors_are_read_as_github_and_mdbook_read_them() {
    let text = "\
# Title
See [a](x.md), [b](../y.md#part \"title\"), ![img](<z.png>) and [web](https://e.org).
`[not](code.md)` is code.
```
[not](fenced.md)
```
## `make compare`: side by side with Cluster API's providers
## Title
";
    let targets: Vec<String> = link_targets(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(targets, ["x.md", "../y.md#part", "z.png", "https://e.org"]);
    let anchors = anchors(text);
    assert!(
        anchors.contains("title") && anchors.contains("title-1"),
        "{anchors:?}"
    );
    assert!(
        anchors.contains("make-compare-side-by-side-with-cluster-apis-providers"),
        "{anchors:?}"
    );
    assert_eq!(
        join_normalized(Path::new("/r/docs/src/dev"), "../../../README.md"),
        PathBuf::from("/r/README.md")
    );
}
