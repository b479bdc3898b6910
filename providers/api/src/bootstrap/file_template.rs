//! `files[].contentFormat: Template` (Cluster API v1.14): a file's content is a Go text/template, rendered
//! before the file is written with `{{ .controlPlane.version }}`, the control plane's `spec.version` as `v` +
//! semver. The `controlPlane` key is left out when that version is unknown, so a template can test
//! `{{ if .controlPlane }}`. The admission webhooks parse inline content; the bootstrap renderer renders.
//!
//! The engine is `gotmpl`, a Rust port of text/template; the integration tests render a set of templates
//! with Go's own and compare. Its parser is more lenient than Go's, so [`parse`] adds the rules Go checks
//! while parsing: `{{if}}`, `{{range}}`, `{{with}}`, `{{define}}` and `{{block}}` close with `{{end}}` and
//! nothing else does, `{{break}}` and `{{continue}}` sit inside a `{{range}}`, functions and variables are
//! defined, and assignments go to declared variables (an execution error in Go). Differences left, none
//! of them in a template that means something: printf widths and precisions above 65,535 are clamped
//! where Go pads to any width; a declaration inside parentheses (`{{ ($x := 1) }}`) is refused; a comment
//! not right next to its delimiters (`{{ /* c */ }}`) is dropped where Go refuses it.

use std::fmt;

use gotmpl::Template;
use gotmpl::parse::{BranchNode, CommandNode, Expr, ListNode, Node, Parser, PipeNode};

use crate::version::Semver;

/// Cluster API's bound on one rendered file.
pub const MAX_RENDERED_BYTES: usize = 1 << 20;

/// A range in a file template that runs longer than this is refused: with at least one byte per
/// iteration the output limit stops it sooner, and an empty loop this long is no bootstrap file.
const MAX_RANGE_ITERATIONS: u64 = MAX_RENDERED_BYTES as u64;

/// text/template's builtin functions, the only ones a file template may call.
const FUNCTIONS: [&str; 19] = [
    "and", "call", "html", "index", "slice", "js", "len", "not", "or", "print", "printf",
    "println", "urlquery", "eq", "ge", "gt", "le", "lt", "ne",
];

/// Why a file template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileTemplateError {
    #[error("is not a Go template: {0}")]
    Parse(String),
    #[error("the Go template does not execute: {0}")]
    Execute(String),
    #[error("the rendered template exceeds the {MAX_RENDERED_BYTES} byte limit")]
    TooLarge,
}

/// `v` + the normalised semver of a control plane's `spec.version` (`1.35` → `v1.35.0`), as Cluster API
/// passes it to templates.
pub fn control_plane_version(spec_version: &str) -> Result<String, String> {
    Semver::parse_tolerant(spec_version).map(|v| format!("v{v}"))
}

/// Parses `content` as Go's text/template parser does.
pub fn parse(content: &str) -> Result<Template, FileTemplateError> {
    let template = Template::new("")
        .max_range_iters(MAX_RANGE_ITERATIONS)
        .parse(content)
        .map_err(|e| FileTemplateError::Parse(parse_error_detail(&e)))?;
    check_as_go_parses(content).map_err(FileTemplateError::Parse)?;
    Ok(template)
}

/// Renders `content` with the control plane's version (`None`: unknown).
pub fn render(
    content: &str,
    control_plane_version: Option<&str>,
) -> Result<String, FileTemplateError> {
    let template = parse(content)?;
    let data = match control_plane_version {
        Some(version) => gotmpl::tmap! { "controlPlane" => gotmpl::tmap! { "version" => version } },
        None => gotmpl::tmap! {},
    };
    let mut out = Limited::default();
    match template.execute_fmt(&mut out, &data) {
        Ok(()) => Ok(out.text),
        Err(_) if out.exceeded => Err(FileTemplateError::TooLarge),
        Err(e) => Err(FileTemplateError::Execute(e.to_string())),
    }
}

/// A parse error's place and rule, without the template's name (empty here).
fn parse_error_detail(error: &gotmpl::TemplateError) -> String {
    match error {
        gotmpl::TemplateError::Parse {
            line, col, message, ..
        }
        | gotmpl::TemplateError::Lex {
            line, col, message, ..
        } => format!("line {line}, column {col}: {message}"),
        other => other.to_string(),
    }
}

/// Marks the end of the content: when a parse of content + this does not end with it at the top level, an
/// `{{end}}` or `{{else}}` stopped the parse early, or a block was still open at the end.
const END_MARK: &str = "end of the file template 5c1e0d7a";

/// The rules Go's parser enforces that `gotmpl`'s leaves to execution, or does not check.
fn check_as_go_parses(content: &str) -> Result<(), String> {
    let marked = format!("{content}{{{{\"{END_MARK}\"}}}}");
    let (list, defines) = Parser::new(&marked, "{{", "}}")
        .and_then(Parser::parse)
        .map_err(|e| parse_error_detail(&e))?;
    let is_mark = |node: &Node| {
        matches!(node, Node::Action(action) if matches!(
            action.pipe.commands.as_slice(),
            [CommandNode { args, .. }] if matches!(args.as_slice(), [Expr::String(_, s)] if &**s == END_MARK)
        ))
    };
    if !list.nodes.last().is_some_and(is_mark) {
        return Err(
            if contains_mark(&list, &is_mark)
                || defines.iter().any(|d| contains_mark(&d.body, &is_mark))
            {
                "unexpected EOF: an {{if}}, {{range}}, {{with}}, {{define}} or {{block}} is not closed with {{end}}"
                .into()
            } else {
                "unexpected {{end}} or {{else}} outside {{if}}, {{range}} and {{with}}".into()
            },
        );
    }
    Scope::new().list(&list)?;
    for define in &defines {
        // A definition is a template of its own: only `$`, outside any range.
        Scope::new().list(&define.body)?;
    }
    Ok(())
}

fn contains_mark(list: &ListNode, is_mark: &impl Fn(&Node) -> bool) -> bool {
    list.nodes.iter().any(|node| match node {
        Node::List(inner) => contains_mark(inner, is_mark),
        Node::If(b) | Node::Range(b) | Node::With(b) => {
            contains_mark(&b.body, is_mark)
                || b.else_body
                    .as_ref()
                    .is_some_and(|e| contains_mark(e, is_mark))
        }
        Node::Define(d) => contains_mark(&d.body, is_mark),
        other => is_mark(other),
    })
}

/// Variables in scope and whether a `{{range}}` body encloses, as Go's parser tracks them.
struct Scope {
    variables: Vec<String>,
    in_range: bool,
}

impl Scope {
    fn new() -> Self {
        Self {
            variables: vec!["$".into()],
            in_range: false,
        }
    }

    fn list(&mut self, list: &ListNode) -> Result<(), String> {
        for node in &list.nodes {
            match node {
                Node::List(inner) => self.list(inner)?,
                // Declared variables live until the end of the enclosing block.
                Node::Action(action) => self.pipe(&action.pipe)?,
                Node::If(b) | Node::With(b) => self.branch(b, false)?,
                Node::Range(b) => self.branch(b, true)?,
                Node::Template(t) => {
                    if let Some(pipe) = &t.pipe {
                        self.pipe(pipe)?;
                    }
                }
                Node::Break(_) if !self.in_range => {
                    return Err("{{break}} outside {{range}}".into());
                }
                Node::Continue(_) if !self.in_range => {
                    return Err("{{continue}} outside {{range}}".into());
                }
                Node::Define(d) => Scope::new().list(&d.body)?,
                Node::Text(_) | Node::Break(_) | Node::Continue(_) => {}
            }
        }
        Ok(())
    }

    /// A control's variables, declared in its pipeline or body, end with it; only its body is in the range.
    fn branch(&mut self, branch: &BranchNode, range: bool) -> Result<(), String> {
        let (depth, in_range) = (self.variables.len(), self.in_range);
        self.pipe(&branch.pipe)?;
        self.in_range = in_range || range;
        let body = self.list(&branch.body);
        self.in_range = in_range;
        let else_body = match (&body, &branch.else_body) {
            (Ok(()), Some(else_body)) => self.list(else_body),
            _ => Ok(()),
        };
        self.variables.truncate(depth);
        body.and(else_body)
    }

    fn pipe(&mut self, pipe: &PipeNode) -> Result<(), String> {
        // Assigning to an undeclared variable fails Go's execution; `gotmpl` would declare it.
        if let Some(name) = pipe
            .decl
            .iter()
            .find(|d| pipe.is_assign && !self.variables.iter().any(|v| v == d.as_str()))
        {
            return Err(format!("undefined variable {:?}", name.as_str()));
        }
        // Go declares before it reads the commands.
        self.variables
            .extend(pipe.decl.iter().map(|d| d.to_string()));
        pipe.commands
            .iter()
            .flat_map(|command| &command.args)
            .try_for_each(|arg| self.expr(arg))
    }

    fn expr(&mut self, expr: &Expr) -> Result<(), String> {
        match expr {
            Expr::Identifier(_, name) if !FUNCTIONS.contains(&name.as_str()) => {
                Err(format!("function {:?} not defined", name.as_str()))
            }
            Expr::Variable(_, name, _) if !self.variables.iter().any(|v| v == name.as_str()) => {
                Err(format!("undefined variable {:?}", name.as_str()))
            }
            Expr::Pipe(_, pipe) => {
                // A parenthesised pipeline's declarations stay in scope, as in Go.
                self.pipe(pipe)
            }
            Expr::Chain(_, base, _) => self.expr(base),
            _ => Ok(()),
        }
    }
}

/// Collects output up to [`MAX_RENDERED_BYTES`]; a write past it fails the execution.
#[derive(Default)]
struct Limited {
    text: String,
    exceeded: bool,
}

impl fmt::Write for Limited {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.text.len() + s.len() > MAX_RENDERED_BYTES {
            self.exceeded = true;
            return Err(fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(content: &str, version: Option<&str>) -> String {
        render(content, version).unwrap_or_else(|e| panic!("{content:?}: {e}"))
    }

    fn refused(content: &str) -> String {
        match render(content, Some("v1.35.0")) {
            Err(FileTemplateError::Parse(detail)) => detail,
            other => panic!("{content:?} must not parse, got {other:?}"),
        }
    }

    #[test]
    fn the_version_is_rendered() {
        assert_eq!(
            ok("v={{ .controlPlane.version }}", Some("v1.35.0")),
            "v=v1.35.0"
        );
    }

    #[test]
    fn a_template_can_test_for_an_unknown_version() {
        let content = "{{ if .controlPlane }}v={{ .controlPlane.version }}{{ end }}done";
        assert_eq!(ok(content, None), "done");
        assert_eq!(ok(content, Some("v1.34.2")), "v=v1.34.2done");
    }

    #[test]
    fn the_version_is_normalised_as_cluster_api_does() {
        assert_eq!(control_plane_version("1.35").unwrap(), "v1.35.0");
        assert_eq!(control_plane_version("v1.36.3").unwrap(), "v1.36.3");
        assert_eq!(
            control_plane_version("v1.37.0-rc.1").unwrap(),
            "v1.37.0-rc.1"
        );
        assert!(control_plane_version("one.two").is_err());
    }

    #[test]
    fn blocks_must_pair_up() {
        assert!(refused("a{{ end }}b").starts_with("unexpected {{end}}"));
        assert!(refused("{{ else }}").starts_with("unexpected {{end}} or {{else}}"));
        assert!(refused("{{ if .x }}open").starts_with("unexpected EOF"));
        assert!(refused("{{ define \"d\" }}open").starts_with("unexpected EOF"));
        assert!(refused("{{ range 2 }}{{ with 1 }}open{{ end }}").starts_with("unexpected EOF"));
        assert_eq!(
            ok("{{ define \"d\" }}D{{ end }}{{ template \"d\" }}", None),
            "D"
        );
    }

    #[test]
    fn break_and_continue_sit_in_a_range_body() {
        assert_eq!(
            refused("{{ if false }}{{ break }}{{ end }}"),
            "{{break}} outside {{range}}"
        );
        assert_eq!(
            refused("{{ range 1 }}{{ else }}{{ continue }}{{ end }}"),
            "{{continue}} outside {{range}}"
        );
        assert_eq!(
            refused("{{ range 1 }}{{ define \"d\" }}{{ break }}{{ end }}{{ end }}"),
            "{{break}} outside {{range}}"
        );
        assert_eq!(
            ok(
                "{{ range 3 }}{{ if eq . 1 }}{{ break }}{{ end }}{{ . }}{{ end }}",
                None
            ),
            "0"
        );
    }

    #[test]
    fn functions_and_variables_must_be_defined() {
        assert_eq!(
            refused("{{ if false }}{{ env \"HOME\" }}{{ end }}"),
            "function \"env\" not defined"
        );
        assert_eq!(refused("{{ $v }}"), "undefined variable \"$v\"");
        assert_eq!(refused("{{ $v = 1 }}"), "undefined variable \"$v\"");
        // A control's variables end with it.
        assert_eq!(
            refused("{{ with $v := 1 }}{{ end }}{{ $v }}"),
            "undefined variable \"$v\""
        );
        assert_eq!(
            ok(
                "{{ with $v := 1 }}{{ else }}{{ $v }}{{ end }}{{ $w := 2 }}{{ $w }}",
                None
            ),
            "2"
        );
        // A definition sees only `$`.
        assert_eq!(
            refused("{{ $v := 1 }}{{ define \"d\" }}{{ $v }}{{ end }}"),
            "undefined variable \"$v\""
        );
    }

    #[test]
    fn an_execution_error_is_told_apart() {
        assert!(matches!(
            render(
                "{{ range .controlPlane.version }}{{ end }}",
                Some("v1.35.0")
            ),
            Err(FileTemplateError::Execute(_))
        ));
    }

    #[test]
    fn output_past_one_mebibyte_is_refused() {
        let content = r#"{{ range 20 }}{{ printf "%65535s" "" }}{{ end }}"#;
        assert_eq!(render(content, None), Err(FileTemplateError::TooLarge));
        let content = r#"{{ range 16 }}{{ printf "%65535s" "" }}{{ end }}{{ printf "%16s" "" }}"#;
        assert_eq!(ok(content, None).len(), MAX_RENDERED_BYTES);
    }
}
