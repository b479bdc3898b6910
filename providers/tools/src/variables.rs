//! The one reader of `${VAR}` expressions, in two readings.
//!
//! Templates ([`Template::parse`]) are read as clusterctl's simple YAML processor reads them with
//! drone/envsubst v2:
//!
//! - `${VAR}` is the value of `VAR`;
//! - `${VAR:=default}`, `${VAR=default}` and `${VAR:-default}` are the value of `VAR`, or `default` when
//!   `VAR` is unset *or empty* (envsubst does not tell the two apart); a default may itself hold `${…}`;
//! - `$$` is a literal `$`, so `$${VAR}` stays `${VAR}` in the output;
//! - a bare `$VAR` (no braces) is plain text, as envsubst leaves it;
//! - the legacy spellings `${ VAR }`, `${ VAR}` and `${VAR }` are read as `${VAR}`.
//!
//! A variable is *required* when its first use has no default (or an empty one); clusterctl then refuses to
//! render while it is unset. Variables nested inside a default are not checked, as in clusterctl.
//!
//! Expressions envsubst documents as unsupported (`${VAR-default}`, `${VAR+alt}`, `${VAR:?msg}`,
//! `${VAR:+alt}`) and its string functions (`${#VAR}`, `${VAR^^}`, `${VAR:1:2}`, `${VAR/a/b}`, …) are
//! rejected with the line they are on, rather than rendered differently from clusterctl.
//!
//! Manifests being validated ([`Template::scan`]) are read leniently: only `${NAME}` and
//! `${NAME<op>default}` with an ASCII name count as variables, a default runs to the first `}`, `$$` is
//! no escape and anything else is text. See [`Reading`] for why the two differ.

use std::collections::BTreeSet;
use std::fmt;

/// How `${…}` is read. Templates are read exactly as clusterctl reads them, so what we render is what
/// clusterctl renders and what it would refuse is refused. The validator reads manifests that may already
/// be rendered, where a `${VAR}` (e.g. from `$${VAR}`) is meant for the node and a shell's `${x%.*}` is
/// plain text: it only asks which values still hold a variable and what their defaults give, so it takes
/// well-formed references and passes everything else by. Both readings keep what they did before they
/// shared this parser (ASCII names and a default up to the first `}` in the lenient one), so neither a
/// rendered template nor a validation verdict changed with the move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    Clusterctl,
    Lenient,
}

/// A piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    /// Text copied to the output (escapes already resolved).
    Text(String),
    /// `${name}` or `${name<op>default}`.
    Variable(Variable),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Variable {
    name: String,
    /// `Some` for the default forms (`:=`, `=`, `:-`), holding the default's pieces (maybe none).
    default: Option<Vec<Node>>,
    /// Line of the `${` in the template, counting from 1.
    line: usize,
}

/// What is wrong with the `${…}` syntax of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    /// Line of the offending expression, counting from 1.
    pub line: usize,
    /// What is wrong and how to write it instead.
    pub message: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A variable a template uses, at its first use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateVariable {
    /// Variable name as written (case-sensitive).
    pub name: String,
    /// Line of the first use, counting from 1.
    pub line: usize,
    /// The default of the first use as clusterctl shows it (nested variables as `${NAME}`); `None` when the
    /// first use has no default or an empty one, which makes the variable required.
    pub default: Option<String>,
}

impl TemplateVariable {
    /// Whether rendering needs a value for this variable.
    pub fn is_required(&self) -> bool {
        self.default.is_none()
    }
}

/// A template parsed once: render it with any lookup, or list its variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    nodes: Vec<Node>,
}

impl Template {
    /// Parses `text` as clusterctl does; errors name the line of the bad expression.
    pub fn parse(text: &str) -> Result<Template, SyntaxError> {
        Self::read(text, Reading::Clusterctl)
    }

    /// Reads `text` leniently, as the validator does: malformed expressions are text, never errors.
    pub fn scan(text: &str) -> Template {
        Self::read(text, Reading::Lenient).expect("the lenient reading accepts any text")
    }

    fn read(text: &str, reading: Reading) -> Result<Template, SyntaxError> {
        let source = Source::new(text, reading);
        let mut parser = Parser {
            chars: source.text.char_indices().collect(),
            position: 0,
            source: &source,
            reading,
        };
        let nodes = parser.parse_text()?;
        Ok(Template { nodes })
    }

    /// Whether any variable is left.
    pub fn has_variables(&self) -> bool {
        self.nodes
            .iter()
            .any(|node| matches!(node, Node::Variable(_)))
    }

    /// Whether the text is one variable and nothing else, e.g. `${REPLICAS:=3}`.
    pub fn is_variable_only(&self) -> bool {
        matches!(self.nodes.as_slice(), [Node::Variable(_)])
    }

    /// The text with every variable that has a default replaced by that default, the others left as
    /// `${NAME}`.
    pub fn fill_defaults(&self) -> String {
        self.nodes
            .iter()
            .map(|node| match node {
                Node::Text(text) => text.clone(),
                Node::Variable(Variable {
                    default: Some(default),
                    ..
                }) => display_default(default),
                Node::Variable(variable) => format!("${{{}}}", variable.name),
            })
            .collect()
    }

    /// Every variable used outside a default, once, at its first use, in order of first use.
    pub fn variables(&self) -> Vec<TemplateVariable> {
        let mut seen = BTreeSet::new();
        let mut variables = Vec::new();
        for node in &self.nodes {
            if let Node::Variable(variable) = node
                && seen.insert(variable.name.as_str())
            {
                let default = variable
                    .default
                    .as_deref()
                    .map(display_default)
                    .filter(|text| !text.is_empty());
                variables.push(TemplateVariable {
                    name: variable.name.clone(),
                    line: variable.line,
                    default,
                });
            }
        }
        variables
    }

    /// The required variables `lookup` has no value for, at their first use. Empty when rendering can go
    /// ahead.
    pub fn missing<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> Vec<TemplateVariable> {
        self.variables()
            .into_iter()
            .filter(|variable| variable.is_required() && lookup(&variable.name).is_none())
            .collect()
    }

    /// Substitutes every variable; an unset variable counts as empty (check [`Template::missing`] first).
    pub fn render<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
        let mut out = String::new();
        render_nodes(&self.nodes, &lookup, &mut out);
        out
    }
}

/// Renders `text` in one step: parse, then substitute with `lookup` (unset variables are empty).
pub fn substitute<'a>(
    text: &str,
    lookup: impl Fn(&str) -> Option<&'a str>,
) -> Result<String, SyntaxError> {
    Ok(Template::parse(text)?.render(lookup))
}

fn render_nodes<'a>(nodes: &[Node], lookup: &impl Fn(&str) -> Option<&'a str>, out: &mut String) {
    for node in nodes {
        match node {
            Node::Text(text) => out.push_str(text),
            Node::Variable(variable) => {
                let value = lookup(&variable.name).unwrap_or("");
                match &variable.default {
                    Some(default) if value.is_empty() => render_nodes(default, lookup, out),
                    _ => out.push_str(value),
                }
            }
        }
    }
}

/// The default as `clusterctl generate cluster --list-variables` shows it.
fn display_default(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|node| match node {
            Node::Text(text) => text.clone(),
            Node::Variable(variable) => format!("${{{}}}", variable.name),
        })
        .collect()
}

/// The template text with legacy `${ VAR }` spellings normalized, and the original line of every byte.
struct Source {
    text: String,
    lines: Vec<usize>,
}

impl Source {
    fn new(original: &str, reading: Reading) -> Source {
        let mut text = String::with_capacity(original.len());
        let mut lines = Vec::with_capacity(original.len());
        let mut line = 1;
        let mut rest = original;
        while !rest.is_empty() {
            if let Some(name) = rest
                .strip_prefix("${")
                .filter(|_| reading == Reading::Clusterctl)
                .and_then(legacy_variable_name)
            {
                let (name, consumed) = name;
                for byte in format!("${{{name}}}").bytes() {
                    text.push(byte as char);
                    lines.push(line);
                }
                line += rest[..consumed].matches('\n').count();
                rest = &rest[consumed..];
                continue;
            }
            let c = rest.chars().next().expect("rest is not empty");
            text.push(c);
            lines.extend(std::iter::repeat_n(line, c.len_utf8()));
            if c == '\n' {
                line += 1;
            }
            rest = &rest[c.len_utf8()..];
        }
        Source { text, lines }
    }

    fn line_at(&self, byte: usize) -> usize {
        self.lines
            .get(byte)
            .or(self.lines.last())
            .copied()
            .unwrap_or(1)
    }
}

/// clusterctl rewrites `${ VAR }`, `${ VAR}` and `${VAR }` (at least one blank inside the braces, name of
/// `[A-Za-z0-9_$]`) to `${VAR}` before substituting. `after_brace` is the text after `${`; returns the
/// name and how many bytes of the text from `${` on the expression spans.
fn legacy_variable_name(after_brace: &str) -> Option<(&str, usize)> {
    let is_blank = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c');
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    let name_start = after_brace.len() - after_brace.trim_start_matches(is_blank).len();
    let after_leading = &after_brace[name_start..];
    let name_len = after_leading.len() - after_leading.trim_start_matches(is_name).len();
    if name_len == 0 {
        return None;
    }
    let after_name = &after_leading[name_len..];
    let trailing = after_name.len() - after_name.trim_start_matches(is_blank).len();
    if name_start + trailing == 0 || !after_name[trailing..].starts_with('}') {
        return None;
    }
    let name = &after_leading[..name_len];
    Some((name, 2 + name_start + name_len + trailing + 1))
}

struct Parser<'s> {
    chars: Vec<(usize, char)>,
    position: usize,
    source: &'s Source,
    reading: Reading,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.position).map(|&(_, c)| c)
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.position + ahead).map(|&(_, c)| c)
    }

    fn line(&self, position: usize) -> usize {
        let byte = self
            .chars
            .get(position)
            .map_or(self.source.text.len(), |&(byte, _)| byte);
        self.source.line_at(byte)
    }

    fn error(&self, start: usize, message: String) -> SyntaxError {
        SyntaxError {
            line: self.line(start),
            message,
        }
    }

    /// The text an expression starting at `start` spans so far, for messages.
    fn excerpt(&self, start: usize) -> String {
        let end = (self.position + 1).min(self.chars.len());
        let text: String = self.chars[start..end].iter().map(|&(_, c)| c).collect();
        let text = text.lines().next().unwrap_or("").to_owned();
        if text.chars().count() > 60 {
            text.chars().take(60).collect::<String>() + "…"
        } else {
            text
        }
    }

    /// Top level: text with `$$` escapes and `${…}` expressions, up to the end.
    fn parse_text(&mut self) -> Result<Vec<Node>, SyntaxError> {
        let mut nodes = Vec::new();
        let mut text = String::new();
        while let Some(c) = self.peek() {
            match (c, self.peek_at(1)) {
                ('$', Some('{')) if self.reading == Reading::Lenient => {
                    match self.scan_expression() {
                        Ok(variable) => {
                            push_text(&mut nodes, &mut text);
                            nodes.push(Node::Variable(variable));
                        }
                        Err(passed) => text.push_str(&passed),
                    }
                }
                ('$', Some('{')) => {
                    push_text(&mut nodes, &mut text);
                    nodes.push(Node::Variable(self.parse_expression()?));
                }
                ('$', Some('$')) if self.reading == Reading::Clusterctl => {
                    text.push('$');
                    self.position += 2;
                }
                _ => {
                    text.push(c);
                    self.position += 1;
                }
            }
        }
        push_text(&mut nodes, &mut text);
        Ok(nodes)
    }

    /// `${name}` or `${name<op>default}`, with the parser at `$`.
    fn parse_expression(&mut self) -> Result<Variable, SyntaxError> {
        let start = self.position;
        let line = self.line(start);
        self.position += 2;
        if self.peek() == Some('#') {
            return Err(self.unsupported(start));
        }
        let name = self.read_name();
        if name.is_empty() {
            return Err(self.error(
                start,
                format!(
                    "`{}` has no variable name; a variable is written ${{NAME}}, a literal `$` as `$$`",
                    self.excerpt(start)
                ),
            ));
        }
        if self.peek() == Some('}') {
            self.position += 1;
            return Ok(Variable {
                name,
                default: None,
                line,
            });
        }
        let operator = match (self.default_operator(), self.peek(), self.peek_at(1)) {
            (Some(operator), ..) => operator,
            (None, Some(':'), Some(second @ ('?' | '+'))) => {
                return Err(self.error(
                    start,
                    format!(
                        "`${{{name}:{second}…}}`: envsubst, which clusterctl uses, lists `:?` and `:+` as \
                         unsupported; use ${{{name}:=default}} or ${{{name}}}"
                    ),
                ));
            }
            (None, Some('-' | '+' | '?'), _) => {
                let operator = self.peek().expect("matched");
                return Err(self.error(
                    start,
                    format!(
                        "`${{{name}{operator}…}}` is not clusterctl syntax (envsubst reads it as a missing \
                         closing brace); write ${{{name}:-default}} or ${{{name}:=default}}"
                    ),
                ));
            }
            (None, Some(':' | ',' | '^' | '/' | '#' | '%'), _) => {
                return Err(self.unsupported(start));
            }
            (None, None, _) => {
                return Err(self.error(
                    start,
                    format!(
                        "`{}` is missing its closing brace `}}`",
                        self.excerpt(start)
                    ),
                ));
            }
            (None, Some(c), _) => {
                return Err(self.error(
                    start,
                    format!(
                        "`{}` is missing its closing brace `}}` (a variable name is letters, digits and `_`, \
                         found {c:?})",
                        self.excerpt(start)
                    ),
                ));
            }
        };
        self.position += operator;
        let default = self.parse_default(start)?;
        Ok(Variable {
            name,
            default: Some(default),
            line,
        })
    }

    /// `${NAME}` or `${NAME<op>default}` read leniently, with the parser at `$`: the expression runs to
    /// the first `}` and its default is the text before it. Anything else is given back as text (`Err`),
    /// up to and with that `}`, or to the end when there is none.
    fn scan_expression(&mut self) -> Result<Variable, String> {
        let start = self.position;
        let line = self.line(start);
        let Some(close) = (start + 2..self.chars.len()).find(|&i| self.chars[i].1 == '}') else {
            self.position = self.chars.len();
            return Err(self.text(start, self.chars.len()));
        };
        self.position += 2;
        let name = self.read_name();
        // `Some(default)` for a well-formed reference; a default is `Some(text)`.
        let reference = if name.is_empty() {
            None
        } else if self.position == close {
            Some(None)
        } else {
            self.default_operator()
                .map(|operator| Some(self.text(self.position + operator, close)))
        };
        let passed = self.text(start, close + 1);
        self.position = close + 1;
        match reference {
            Some(default) => Ok(Variable {
                name,
                default: default.map(|text| vec![Node::Text(text)]),
                line,
            }),
            None => Err(passed),
        }
    }

    /// A variable name at the parser, which moves past it.
    fn read_name(&mut self) -> String {
        let start = self.position;
        let is_name = |c: char| match self.reading {
            Reading::Clusterctl => c.is_alphanumeric() || c == '_',
            Reading::Lenient => c.is_ascii_alphanumeric() || c == '_',
        };
        while self.peek().is_some_and(is_name) {
            self.position += 1;
        }
        self.text(start, self.position)
    }

    /// The length of the default operator at the parser (`:=`, `:-`, `=`), if one is there.
    fn default_operator(&self) -> Option<usize> {
        match (self.peek(), self.peek_at(1)) {
            (Some(':'), Some('=' | '-')) => Some(2),
            (Some('='), _) => Some(1),
            _ => None,
        }
    }

    fn text(&self, from: usize, to: usize) -> String {
        self.chars[from..to].iter().map(|&(_, c)| c).collect()
    }

    /// The default of `${name<op>…}` up to its `}`: text (no escapes, no `}`) and nested expressions.
    fn parse_default(&mut self, start: usize) -> Result<Vec<Node>, SyntaxError> {
        let mut nodes = Vec::new();
        let mut text = String::new();
        loop {
            match (self.peek(), self.peek_at(1)) {
                (Some('}'), _) => {
                    self.position += 1;
                    push_text(&mut nodes, &mut text);
                    return Ok(nodes);
                }
                (Some('$'), Some('{')) => {
                    push_text(&mut nodes, &mut text);
                    nodes.push(Node::Variable(self.parse_expression()?));
                }
                (Some(c), _) => {
                    text.push(c);
                    self.position += 1;
                }
                (None, _) => {
                    return Err(self.error(
                        start,
                        format!(
                            "`{}` is missing its closing brace `}}`",
                            self.excerpt(start)
                        ),
                    ));
                }
            }
        }
    }

    fn unsupported(&mut self, start: usize) -> SyntaxError {
        while self.peek().is_some_and(|c| c != '}' && c != '\n') {
            self.position += 1;
        }
        self.error(
            start,
            format!(
                "`{}` uses an envsubst string function this generator does not support; only ${{VAR}}, \
                 ${{VAR:=default}}, ${{VAR=default}} and ${{VAR:-default}} are",
                self.excerpt(start)
            ),
        )
    }
}

fn push_text(nodes: &mut Vec<Node>, text: &mut String) {
    if !text.is_empty() {
        nodes.push(Node::Text(std::mem::take(text)));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn render(text: &str, values: &[(&str, &str)]) -> Result<String, SyntaxError> {
        let values: HashMap<&str, &str> = values.iter().copied().collect();
        substitute(text, |name| values.get(name).copied())
    }

    fn rendered(text: &str, values: &[(&str, &str)]) -> String {
        render(text, values).unwrap()
    }

    #[test]
    fn plain_variables_are_replaced_and_unset_ones_are_empty() {
        let values = [("CLUSTER_NAME", "prod"), ("PREFIX", "capi")];
        assert_eq!(
            rendered("name: ${PREFIX}-${CLUSTER_NAME}-md-0", &values),
            "name: capi-prod-md-0"
        );
        assert_eq!(rendered("a${UNSET}b", &values), "ab");
    }

    #[test]
    fn defaults_apply_when_unset_or_empty() {
        for form in [":=", "=", ":-"] {
            let text = format!("v: ${{VAR{form}fallback}}");
            assert_eq!(rendered(&text, &[]), "v: fallback", "{form} unset");
            assert_eq!(
                rendered(&text, &[("VAR", "")]),
                "v: fallback",
                "{form} empty"
            );
            assert_eq!(rendered(&text, &[("VAR", "set")]), "v: set", "{form} set");
        }
        assert_eq!(rendered("${VAR:=}", &[]), "");
    }

    #[test]
    fn defaults_may_nest_variables_and_hold_dollars_and_colons() {
        let values = [("BASE", "ubuntu"), ("KUBERNETES_VERSION", "v1.33.1")];
        assert_eq!(
            rendered(
                "${IMAGE:=${BASE}-capi-image-${KUBERNETES_VERSION}}",
                &values
            ),
            "ubuntu-capi-image-v1.33.1"
        );
        assert_eq!(rendered("${A:=${B:=${C:=deep}}}", &[]), "deep");
        assert_eq!(
            rendered("${URL:=http://host:80/$x}", &[]),
            "http://host:80/$x"
        );
        // As in envsubst, `$$` inside a default is not an escape.
        assert_eq!(rendered("${A:=$$}", &[]), "$$");
    }

    #[test]
    fn double_dollar_is_a_literal_dollar() {
        let values = [("VAR", "value")];
        assert_eq!(rendered("$${VAR}", &values), "${VAR}");
        assert_eq!(rendered("cost: $$5", &values), "cost: $5");
        assert_eq!(rendered("$$$", &values), "$$");
        assert_eq!(rendered("$$${VAR}", &values), "$value");
        assert_eq!(rendered("$$$${VAR}", &values), "$${VAR}");
        assert_eq!(
            rendered("some text ${VAR}$${var$${VAR}$VAR${VAR}", &values),
            "some text value${var${VAR}$VARvalue"
        );
    }

    #[test]
    fn bare_dollar_names_stay_text() {
        assert_eq!(
            rendered("echo $HOME $1 $ {X} $", &[("HOME", "/root")]),
            "echo $HOME $1 $ {X} $"
        );
        assert_eq!(
            rendered("run: [ \"$(hostname)\" ]", &[]),
            "run: [ \"$(hostname)\" ]"
        );
    }

    #[test]
    fn legacy_blank_spellings_are_read_as_plain_variables() {
        let values = [("VAR", "v")];
        for text in ["${ VAR }", "${ VAR}", "${VAR }", "${\tVAR\n}"] {
            assert_eq!(rendered(text, &values), "v", "{text:?}");
        }
        assert_eq!(render("${ }", &values).unwrap_err().line, 1);
    }

    #[test]
    fn legacy_spellings_are_rewritten_before_escapes() {
        // clusterctl rewrites `${ VAR }` before envsubst sees the text, so an escaped one loses its blanks.
        assert_eq!(rendered("$${ VAR }", &[("VAR", "v")]), "${VAR}");
        assert_eq!(rendered("$${VAR}", &[("VAR", "v")]), "${VAR}");
    }

    #[test]
    fn variables_are_listed_at_their_first_use_with_clusterctl_defaults() {
        let template = Template::parse(
            "a: ${NAME}\nb: ${NAME:=ignored}\nc: ${GEN:=genc01}\nd: ${IMAGE:=${BASE}-x}\ne: ${EMPTY:=}\n\
             f: ${ LEGACY }\n",
        )
        .unwrap();
        let listed: Vec<_> = template
            .variables()
            .into_iter()
            .map(|v| (v.name, v.line, v.default))
            .collect();
        assert_eq!(
            listed,
            [
                ("NAME".into(), 1, None),
                ("GEN".into(), 3, Some("genc01".into())),
                ("IMAGE".into(), 4, Some("${BASE}-x".into())),
                ("EMPTY".into(), 5, None),
                ("LEGACY".into(), 6, None),
            ]
        );
    }

    #[test]
    fn missing_lists_every_unset_required_variable_once() {
        let template =
            Template::parse("x: ${A}\ny: ${B:=b}\nz: ${C}\nw: ${A}\nv: ${D:=${E}}\n").unwrap();
        let values: HashMap<&str, &str> = [("C", "")].into_iter().collect();
        let missing: Vec<_> = template
            .missing(|name| values.get(name).copied())
            .into_iter()
            .map(|v| (v.name, v.line))
            .collect();
        // C is set (to empty), B has a default, E only appears inside a default: none is missing.
        assert_eq!(missing, [("A".to_owned(), 1)]);
    }

    #[test]
    fn a_variable_first_used_with_a_default_is_optional_everywhere() {
        // clusterctl keys a variable to its first use; a later bare use renders empty.
        let template = Template::parse("${GEN:=genc01} ${GEN}").unwrap();
        assert!(template.missing(|_| None).is_empty());
        assert_eq!(template.render(|_| None), "genc01 ");
    }

    #[test]
    fn lines_count_from_one_and_survive_legacy_rewrites() {
        let template = Template::parse("a\n${ A\n}\nb ${B}\n${C:=x\ny} ${D}").unwrap();
        let lines: Vec<_> = template
            .variables()
            .into_iter()
            .map(|v| (v.name, v.line))
            .collect();
        assert_eq!(
            lines,
            [
                ("A".to_owned(), 2),
                ("B".to_owned(), 4),
                ("C".to_owned(), 5),
                ("D".to_owned(), 6)
            ]
        );
    }

    #[test]
    fn syntax_errors_name_the_line_and_the_fix() {
        let cases = [
            (
                "ok\n${VAR-x}",
                2,
                "write ${VAR:-default} or ${VAR:=default}",
            ),
            ("${VAR+x}", 1, "not clusterctl syntax"),
            ("${VAR:+x}", 1, "lists `:?` and `:+` as unsupported"),
            ("${VAR:?x}", 1, "lists `:?` and `:+` as unsupported"),
            ("\n\n${VAR", 3, "missing its closing brace"),
            ("${VAR:=abc", 1, "missing its closing brace"),
            ("${VAR x}", 1, "missing its closing brace"),
            ("${}", 1, "no variable name"),
            ("${", 1, "no variable name"),
            ("${#VAR}", 1, "does not support"),
            ("${VAR^^}", 1, "does not support"),
            ("${VAR:1:2}", 1, "does not support"),
            ("${VAR/a/b}", 1, "does not support"),
            ("${VAR%.*}", 1, "does not support"),
            ("${A:=${B-x}}", 1, "write ${B:-default}"),
        ];
        for (text, line, message) in cases {
            let error = Template::parse(text).unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(
                error.message.contains(message),
                "{text:?}: {error} lacks {message:?}"
            );
        }
    }

    #[test]
    fn the_lenient_reading_takes_well_formed_references_and_leaves_the_rest_as_text() {
        let template = Template::scan("${A}-${B:=x}${C=y}${D:-}${bad name}${}$E ${x%.*} ${F");
        assert!(template.has_variables());
        assert_eq!(
            template.fill_defaults(),
            "${A}-xy${bad name}${}$E ${x%.*} ${F"
        );
        assert!(!Template::scan("plain text with $HOME and ${x%.*}").has_variables());
        // `$$` is no escape, a default runs to the first `}`, names are ASCII.
        assert!(Template::scan("$${X}").has_variables());
        assert_eq!(Template::scan("${A:=${B}}").fill_defaults(), "${B}");
        assert!(!Template::scan("${Ä}").has_variables());
        assert!(Template::scan("${N:=3}").is_variable_only());
        assert!(!Template::scan("n: ${N:=3}").is_variable_only());
    }

    proptest! {
        #[test]
        fn text_without_dollars_is_unchanged(text in "[^$]{0,200}") {
            prop_assert_eq!(rendered(&text, &[("A", "x")]), text);
        }

        #[test]
        fn escaped_text_renders_back_to_itself(text in "[a-zA-Z0-9_{}:=\\-#$]{0,120}") {
            // Escaping every `$` makes any text a template that renders to exactly that text (but for
            // blanks inside braces: see `legacy_spellings_are_rewritten_before_escapes`).
            let escaped = text.replace('$', "$$");
            prop_assert_eq!(rendered(&escaped, &[("A", "x")]), text);
        }

        #[test]
        fn a_set_variable_renders_its_value_whatever_the_form(
            value in "[a-z0-9.-]{1,20}",
            default in "[a-z0-9.-]{0,20}",
            form in prop::sample::select(vec!["", ":=", "=", ":-"]),
        ) {
            let text = if form.is_empty() {
                "${V}".to_owned()
            } else {
                format!("${{V{form}{default}}}")
            };
            prop_assert_eq!(rendered(&text, &[("V", &value)]), value);
        }

        #[test]
        fn parsing_never_panics(text in "[${}:=\\-+?#a-zA-Z_ \n]{0,60}") {
            let _ = Template::parse(&text);
        }
    }
}
