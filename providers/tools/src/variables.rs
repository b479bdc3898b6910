//! The one reader of `${VAR}` expressions, in two readings.
//!
//! Templates ([`Template::parse`]) are read as clusterctl's simple YAML processor reads them: its legacy
//! rewrite (`${ VAR }`, `${ VAR}` and `${VAR }` become `${VAR}`), then drone/envsubst v2, whose scanner,
//! parser and string functions [`crate::envsubst`] follows step for step:
//!
//! - `${VAR}` is the value of `VAR`, empty when unset; `$$` is a literal `$` (not inside a default), and
//!   a bare `$VAR` is plain text;
//! - `${VAR:=default}`, `${VAR=default}`, `${VAR:-default}`, and also `${VAR:?word}` and `${VAR:+word}`,
//!   are the value of `VAR`, or the default when `VAR` is unset *or empty* (envsubst gives all five the
//!   same meaning, unlike a shell); a default may itself hold `${…}`;
//! - the string functions: `${#VAR}` (length in bytes), `${VAR^}`, `${VAR^^}`, `${VAR,}`, `${VAR,,}`
//!   (case), `${VAR:offset}`, `${VAR:offset:length}` (bytes), `${VAR#glob}`, `${VAR##glob}`,
//!   `${VAR%glob}`, `${VAR%%glob}` (trims), `${VAR/from/to}`, `${VAR//from/to}`, `${VAR/#from/to}`,
//!   `${VAR/%from/to}` (replacements; `\/` is a literal `/` in them).
//!
//! A variable is *required* when its first use has nothing after the function, as clusterctl keys it:
//! `${VAR}`, `${VAR:=}`, `${VAR^^}` and `${#VAR}` are, `${VAR:=x}` and `${VAR/a/b}` are not. clusterctl
//! then refuses to render while it is unset. Variables nested inside a function's arguments are not
//! checked, as in clusterctl.
//!
//! Manifests being validated ([`Template::scan`]) are read leniently: only `${NAME}` and
//! `${NAME<op>default}` with an ASCII name count as variables, a default runs to the first `}`, `$$` is
//! no escape and anything else is text. See [`Reading`] for why the two differ.

use std::collections::BTreeSet;
use std::fmt;

use crate::envsubst::{self, ErrorKind, Func};

/// How `${…}` is read. Templates are read exactly as clusterctl reads them, so what we render is what
/// clusterctl renders and what it would refuse is refused. The validator reads manifests that may already
/// be rendered, where a `${VAR}` (e.g. from `$${VAR}`) is meant for the node and a shell's `${x%.*}` is
/// plain text: it only asks which values still hold a variable and what their defaults give, so it takes
/// well-formed references and passes everything else by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    Clusterctl,
    Lenient,
}

/// A piece of a leniently read text.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    /// Text copied to the output.
    Text(String),
    /// `${name}` or `${name<op>default}`.
    Variable(Variable),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Variable {
    name: String,
    /// `Some` for the default forms (`:=`, `=`, `:-`), holding the default's text.
    default: Option<String>,
    /// Line of the `${` in the text, counting from 1.
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
    /// What clusterctl shows as the default of the first use: the function's arguments as written, nested
    /// variables as `${NAME}`; `None` when there are none or they are empty, which makes the variable
    /// required.
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
    body: Body,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Body {
    Clusterctl(Vec<envsubst::Node>),
    Lenient(Vec<Node>),
}

impl Template {
    /// Parses `text` as clusterctl does; errors name the line of the bad expression.
    pub fn parse(text: &str) -> Result<Template, SyntaxError> {
        if let Some(nul) = text.find('\0') {
            // envsubst takes a NUL for the end of the text: clusterctl silently drops the rest.
            return Err(SyntaxError {
                line: 1 + text[..nul].matches('\n').count(),
                message: "a NUL character, where clusterctl's envsubst stops reading and drops the rest of \
                          the template; remove it"
                    .to_owned(),
            });
        }
        let source = Source::new(text, Reading::Clusterctl);
        let nodes = envsubst::parse(&source.text, &source.lines)
            .map_err(|error| source.syntax_error(&error))?;
        Ok(Template {
            body: Body::Clusterctl(nodes),
        })
    }

    /// Reads `text` leniently, as the validator does: malformed expressions are text, never errors.
    pub fn scan(text: &str) -> Template {
        let source = Source::new(text, Reading::Lenient);
        let mut parser = Lenient {
            chars: source.text.char_indices().collect(),
            position: 0,
            source: &source,
        };
        Template {
            body: Body::Lenient(parser.parse_text()),
        }
    }

    /// Whether any variable is left.
    pub fn has_variables(&self) -> bool {
        match &self.body {
            Body::Clusterctl(nodes) => nodes.iter().any(|n| matches!(n, envsubst::Node::Func(_))),
            Body::Lenient(nodes) => nodes.iter().any(|n| matches!(n, Node::Variable(_))),
        }
    }

    /// Whether the text is one variable and nothing else, e.g. `${REPLICAS:=3}`.
    pub fn is_variable_only(&self) -> bool {
        match &self.body {
            Body::Clusterctl(nodes) => matches!(nodes.as_slice(), [envsubst::Node::Func(_)]),
            Body::Lenient(nodes) => matches!(nodes.as_slice(), [Node::Variable(_)]),
        }
    }

    /// The text with every variable that has a default replaced by that default, the others left as
    /// `${NAME}`.
    pub fn fill_defaults(&self) -> String {
        self.uses()
            .into_iter()
            .map(|(text, variable)| match variable {
                None => text,
                Some(variable) => variable
                    .default
                    .unwrap_or_else(|| format!("${{{}}}", variable.name)),
            })
            .collect()
    }

    /// The text and the variable uses at the top level, in order (a use with an empty default listed with
    /// `default: Some("")`).
    fn uses(&self) -> Vec<(String, Option<TemplateVariable>)> {
        match &self.body {
            Body::Clusterctl(nodes) => nodes
                .iter()
                .map(|node| match node {
                    envsubst::Node::Text(text) => {
                        (String::from_utf8_lossy(text).into_owned(), None)
                    }
                    envsubst::Node::Func(func) => (String::new(), Some(func_use(func))),
                })
                .collect(),
            Body::Lenient(nodes) => nodes
                .iter()
                .map(|node| match node {
                    Node::Text(text) => (text.clone(), None),
                    Node::Variable(variable) => (
                        String::new(),
                        Some(TemplateVariable {
                            name: variable.name.clone(),
                            line: variable.line,
                            default: variable.default.clone(),
                        }),
                    ),
                })
                .collect(),
        }
    }

    /// Every variable used outside a function's arguments, once, at its first use, in order of first use.
    pub fn variables(&self) -> Vec<TemplateVariable> {
        let mut seen = BTreeSet::new();
        self.uses()
            .into_iter()
            .filter_map(|(_, variable)| variable)
            .filter(|variable| seen.insert(variable.name.clone()))
            .map(|mut variable| {
                variable.default = variable.default.filter(|d| !d.is_empty());
                variable
            })
            .collect()
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
    /// Fails only where clusterctl would write bytes that are not UTF-8 or crash (see
    /// [`crate::envsubst`]).
    pub fn render<'a>(
        &self,
        lookup: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<String, SyntaxError> {
        match &self.body {
            Body::Clusterctl(nodes) => {
                // Where each expression's output starts, to name the line of a cut character.
                let mut bytes = Vec::new();
                let mut starts = Vec::new();
                for node in nodes {
                    if let envsubst::Node::Func(func) = node {
                        starts.push((bytes.len(), func.line));
                    }
                    let piece =
                        envsubst::eval(std::slice::from_ref(node), &lookup).map_err(|e| {
                            SyntaxError {
                                line: e.line,
                                message: e.message,
                            }
                        })?;
                    bytes.extend(piece);
                }
                String::from_utf8(bytes).map_err(|e| {
                    let at = e.utf8_error().valid_up_to();
                    let line = starts
                        .iter()
                        .take_while(|(start, _)| *start <= at)
                        .last()
                        .map_or(1, |(_, line)| *line);
                    SyntaxError {
                        line,
                        message: "a substring or trim cuts a character in two; clusterctl would write \
                                  the broken bytes (offsets and lengths count bytes, not characters)"
                            .to_owned(),
                    }
                })
            }
            Body::Lenient(nodes) => Ok(nodes
                .iter()
                .map(|node| match node {
                    Node::Text(text) => text.clone(),
                    Node::Variable(variable) => {
                        match (lookup(&variable.name).unwrap_or(""), &variable.default) {
                            ("", Some(default)) => default.clone(),
                            (value, _) => value.to_owned(),
                        }
                    }
                })
                .collect()),
        }
    }
}

/// A use of a variable as clusterctl lists it: the default is the arguments, nested uses as `${NAME}`.
fn func_use(func: &Func) -> TemplateVariable {
    let default: String = func
        .args
        .iter()
        .map(|arg| match arg {
            envsubst::Node::Text(text) => String::from_utf8_lossy(text).into_owned(),
            envsubst::Node::Func(nested) => format!("${{{}}}", nested.param),
        })
        .collect();
    TemplateVariable {
        name: func.param.clone(),
        line: func.line,
        default: (!func.name.is_empty()).then_some(default),
    }
}

/// Renders `text` in one step: parse, then substitute with `lookup` (unset variables are empty).
pub fn substitute<'a>(
    text: &str,
    lookup: impl Fn(&str) -> Option<&'a str>,
) -> Result<String, SyntaxError> {
    Template::parse(text)?.render(lookup)
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

    /// The text from byte `from` to `to` (both moved back to a character boundary), its first line only,
    /// at most 60 characters.
    fn excerpt(&self, from: usize, to: usize) -> String {
        let floor = |mut i: usize| {
            i = i.min(self.text.len());
            while !self.text.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let text = &self.text[floor(from)..floor(to.max(from))];
        let text = text.lines().next().unwrap_or("");
        if text.chars().count() > 60 {
            text.chars().take(60).collect::<String>() + "…"
        } else {
            text.to_owned()
        }
    }

    /// envsubst's refusal as a message naming what is wrong and how to write it.
    fn syntax_error(&self, error: &envsubst::ParseError) -> SyntaxError {
        let next = self
            .text
            .get(error.at..)
            .and_then(|rest| rest.chars().next());
        let through_next = error.at + next.map_or(0, char::len_utf8);
        let excerpt = self.excerpt(error.start, through_next);
        let name: String = self
            .text
            .get(error.start + 2..)
            .unwrap_or("")
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let message = match (error.kind, next) {
            (ErrorKind::TooDeep, _) => format!(
                "`{excerpt}` nests expressions more than {} deep",
                envsubst::MAX_DEPTH
            ),
            (ErrorKind::VariableName, _) => format!(
                "`{excerpt}` has no variable name; a variable is written ${{NAME}}, a literal `$` as `$$`"
            ),
            (_, None)
                if self
                    .text
                    .get(error.start + 2 + name.len()..)
                    .is_some_and(|r| r.starts_with('/')) =>
            {
                format!(
                    "`{excerpt}` is missing the `/` before the replacement or its closing brace `}}` \
                     (${{{name}/from/to}}, ${{{name}/from/}})"
                )
            }
            (_, None) => format!("`{excerpt}` is missing its closing brace `}}`"),
            (ErrorKind::MissingClosingBrace, Some(operator @ ('-' | '+' | '?'))) => format!(
                "`${{{name}{operator}…}}` is not clusterctl syntax (envsubst reads it as a missing closing \
                 brace); write ${{{name}:-default}} or ${{{name}:=default}}"
            ),
            (ErrorKind::MissingClosingBrace, Some(c)) => format!(
                "`{excerpt}` is missing its closing brace `}}` (a variable name is letters, digits and `_`, \
                 found {c:?})"
            ),
            (kind, Some(_)) => format!(
                "`{excerpt}`: clusterctl's envsubst refuses it ({}); it reads ${{VAR}}, ${{VAR:=default}}, \
                 ${{VAR:offset:length}}, ${{VAR/from/to}}, ${{VAR#glob}}, ${{VAR%glob}}, ${{VAR^^}}, \
                 ${{#VAR}} and their variants",
                match kind {
                    ErrorKind::FuncSubstitution => "unable to parse substitution within function",
                    ErrorKind::DefaultFunction => "unable to parse default function",
                    _ => "bad substitution",
                }
            ),
        };
        SyntaxError {
            line: self.line_at(error.start),
            message,
        }
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

/// The lenient reading (see [`Reading`]).
struct Lenient<'s> {
    chars: Vec<(usize, char)>,
    position: usize,
    source: &'s Source,
}

impl Lenient<'_> {
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

    /// Text and well-formed `${…}` references, up to the end.
    fn parse_text(&mut self) -> Vec<Node> {
        let mut nodes = Vec::new();
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if c == '$' && self.peek_at(1) == Some('{') {
                match self.scan_expression() {
                    Ok(variable) => {
                        if !text.is_empty() {
                            nodes.push(Node::Text(std::mem::take(&mut text)));
                        }
                        nodes.push(Node::Variable(variable));
                    }
                    Err(passed) => text.push_str(&passed),
                }
            } else {
                text.push(c);
                self.position += 1;
            }
        }
        if !text.is_empty() {
            nodes.push(Node::Text(text));
        }
        nodes
    }

    /// `${NAME}` or `${NAME<op>default}`, with the parser at `$`: the expression runs to the first `}`
    /// and its default is the text before it. Anything else is given back as text (`Err`), up to and with
    /// that `}`, or to the end when there is none.
    fn scan_expression(&mut self) -> Result<Variable, String> {
        let start = self.position;
        let line = self.line(start);
        let Some(close) = (start + 2..self.chars.len()).find(|&i| self.chars[i].1 == '}') else {
            self.position = self.chars.len();
            return Err(self.text(start, self.chars.len()));
        };
        self.position += 2;
        let name_start = self.position;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            self.position += 1;
        }
        let name = self.text(name_start, self.position);
        // `Some(default)` for a well-formed reference; a default is `Some(text)`.
        let reference = if name.is_empty() {
            None
        } else if self.position == close {
            Some(None)
        } else {
            let operator = match (self.peek(), self.peek_at(1)) {
                (Some(':'), Some('=' | '-')) => Some(2),
                (Some('='), _) => Some(1),
                _ => None,
            };
            operator.map(|operator| Some(self.text(self.position + operator, close)))
        };
        let passed = self.text(start, close + 1);
        self.position = close + 1;
        match reference {
            Some(default) => Ok(Variable {
                name,
                default,
                line,
            }),
            None => Err(passed),
        }
    }

    fn text(&self, from: usize, to: usize) -> String {
        self.chars[from..to].iter().map(|&(_, c)| c).collect()
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
        assert_eq!(template.render(|_| None).unwrap(), "genc01 ");
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
            ("\n\n${VAR", 3, "missing its closing brace"),
            ("${VAR:=abc", 1, "missing its closing brace"),
            ("${VAR x}", 1, "missing its closing brace"),
            ("${}", 1, "no variable name"),
            ("${", 1, "no variable name"),
            ("${A:=${B-x}}", 1, "write ${B:-default}"),
            ("a\n${VAR/x}", 2, "missing the `/` before the replacement"),
            (
                "${VAR/x/y",
                1,
                "missing the `/` before the replacement or its closing brace",
            ),
            (
                "${VAR^x}",
                1,
                "`${VAR^x`: clusterctl's envsubst refuses it (bad substitution)",
            ),
            ("${VAR#}", 1, "unable to parse substitution within function"),
            ("${VAR:2:-1}", 1, "negative length"),
            ("a: b\n\0c", 2, "a NUL character"),
        ];
        for (text, line, message) in cases {
            let error = Template::parse(text)
                .and_then(|template| template.render(|_| Some("hello")))
                .unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(
                error.message.contains(message),
                "{text:?}: {error} lacks {message:?}"
            );
        }
    }

    #[test]
    fn string_functions_render_and_key_variables_as_clusterctl_does() {
        let values = [("IMAGE", "registry.k8s.io/etcd:3.6.16-0"), ("NAME", "prod")];
        assert_eq!(rendered("${IMAGE##*:}", &values), "3.6.16-0");
        assert_eq!(rendered("${IMAGE%:*}", &values), "registry.k8s.io/etcd");
        assert_eq!(rendered("${NAME^^}-${#NAME}", &values), "PROD-4");
        assert_eq!(
            rendered("${IMAGE/registry.k8s.io/mirror}", &values),
            "mirror/etcd:3.6.16-0"
        );
        // envsubst gives `:+` and `:?` the meaning of `:-`, unlike a shell.
        assert_eq!(rendered("${UNSET:+alt} ${NAME:+alt}", &values), "alt prod");
        // A function with arguments keys its variable to them, as a default: not required.
        let template = Template::parse("${A#v} ${B^^} ${#C} ${D/x/}").unwrap();
        let listed: Vec<_> = template
            .variables()
            .into_iter()
            .map(|v| (v.name, v.default))
            .collect();
        assert_eq!(
            listed,
            [
                ("A".to_owned(), Some("v".to_owned())),
                ("B".to_owned(), None),
                ("C".to_owned(), None),
                ("D".to_owned(), Some("x".to_owned())),
            ]
        );
        // A cut character is refused, not written broken.
        let cut = render("${N:0:1}", &[("N", "Ärger")]).unwrap_err();
        assert!(cut.message.contains("cuts a character"), "{cut}");
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
        fn text_without_dollars_is_unchanged(text in "[^$\0]{0,200}") {
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
