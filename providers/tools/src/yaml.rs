//! Multi-document YAML split into its documents without parsing them, so every reader of such a file
//! (validation, `render`, the target namespace of `generate cluster`, the simulator's kubeadm
//! configuration) agrees on where a document starts and what number it has.
//!
//! A document starts at a `---` line (`---` alone, or followed by a blank and the first content of the
//! document) and ends at the next one or at a `...` line. What stands before the first `---` is a
//! document too, unless it is only blank lines and comments.

/// One document of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Document<'a> {
    /// Counting from 1; 0 for the blank or comment-only lines before the first `---`, which are no
    /// document.
    pub number: usize,
    /// The line `text` starts on, counting from 1.
    pub first_line: usize,
    /// The document's whole stretch of the stream: its `---` line, its content, and a `...` line with
    /// whatever follows it up to the next `---`. The texts of [`split`] put together are the stream.
    pub text: &'a str,
    /// What YAML reads as the document: from after the `---` up to the next `---` or `...` line.
    pub content: &'a str,
}

impl Document<'_> {
    /// Whether the document opens with its own `---` line.
    pub fn is_explicit(&self) -> bool {
        self.text
            .split_inclusive('\n')
            .next()
            .is_some_and(|line| marker_content(line).is_some())
    }
}

/// The documents of `yaml`, numbered from 1.
pub fn documents(yaml: &str) -> Vec<Document<'_>> {
    split(yaml)
        .into_iter()
        .filter(|document| document.number > 0)
        .collect()
}

/// Every stretch of `yaml` in order, the lines before the first `---` included (number 0 when they are
/// only blanks and comments), so that editing a document can leave the rest byte for byte.
pub fn split(yaml: &str) -> Vec<Document<'_>> {
    // (text start, content start, content end once a `...` line ended it, first line)
    let mut stretches: Vec<(usize, usize, Option<usize>, usize)> = vec![(0, 0, None, 1)];
    let mut offset = 0;
    for (index, line) in yaml.split_inclusive('\n').enumerate() {
        if let Some(after_marker) = marker_content(line) {
            stretches.push((offset, offset + after_marker, None, index + 1));
        } else if line.trim_end_matches(['\n', '\r']) == "..." {
            let (_, _, end, _) = stretches.last_mut().expect("never empty");
            end.get_or_insert(offset);
        }
        offset += line.len();
    }
    let ends: Vec<usize> = stretches
        .iter()
        .skip(1)
        .map(|&(start, ..)| start)
        .chain([yaml.len()])
        .collect();
    let mut documents: Vec<Document<'_>> = stretches
        .iter()
        .zip(ends)
        .map(
            |(&(start, content_start, content_end, first_line), end)| Document {
                number: 0,
                first_line,
                text: &yaml[start..end],
                content: &yaml[content_start..content_end.unwrap_or(end)],
            },
        )
        .collect();
    let preamble = documents.len() > 1 && is_blank(documents[0].content);
    for (index, document) in documents.iter_mut().enumerate() {
        document.number = if preamble { index } else { index + 1 };
    }
    documents
}

/// For a `---` line, where the document's content starts in it: after the line, or after `--- `
/// when content follows on the same line.
fn marker_content(line: &str) -> Option<usize> {
    let content = line.trim_end_matches(['\n', '\r']);
    if content == "---" {
        Some(line.len())
    } else if content.starts_with("--- ") || content.starts_with("---\t") {
        Some(4)
    } else {
        None
    }
}

fn is_blank(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(yaml: &str) -> Vec<(usize, &str)> {
        documents(yaml)
            .iter()
            .map(|document| (document.number, document.content))
            .collect()
    }

    #[test]
    fn documents_are_numbered_from_one_after_a_comment_only_preamble() {
        assert_eq!(
            contents("# header\n---\na: 1\n---\n\n--- b: 2\n...\n---\nc: 3"),
            [(1, "a: 1\n"), (2, "\n"), (3, "b: 2\n"), (4, "c: 3")]
        );
        assert_eq!(contents("a: 1\n"), [(1, "a: 1\n")]);
        assert_eq!(contents(""), [(1, "")]);
        assert_eq!(
            contents("a: 1\n---\nb: 2\n"),
            [(1, "a: 1\n"), (2, "b: 2\n")]
        );
        // A separator inside a block scalar is indented, so it is no separator.
        assert_eq!(contents("a: |\n  ---\n").len(), 1);
        // What follows `...` up to the next `---` is no document.
        assert_eq!(
            contents("a: 1\n...\nb: 2\n---\nc: 3\n"),
            [(1, "a: 1\n"), (2, "c: 3\n")]
        );
    }

    #[test]
    fn the_stretches_put_together_are_the_stream() {
        for yaml in [
            "# header\n---\na: 1\n---  # two\nb: 2\r\n--- c: 3\n...\ntail\n",
            "---\na: 1\n",
            "a: 1",
            "",
        ] {
            let stretches = split(yaml);
            assert_eq!(stretches.iter().map(|d| d.text).collect::<String>(), yaml);
        }
        let stretches = split("# header\n---\na: 1\n--- b: 2\n");
        let described: Vec<(usize, usize, bool)> = stretches
            .iter()
            .map(|d| (d.number, d.first_line, d.is_explicit()))
            .collect();
        assert_eq!(described, [(0, 1, false), (1, 2, true), (2, 4, true)]);
        assert_eq!(stretches[2].content, "b: 2\n");
    }
}
