//! `${…}` read as drone/envsubst v2 reads it (commit 179042472c46, the version clusterctl v1.14 pins),
//! and each of its string functions, step for step: its scanner works on bytes and keeps a little state
//! between calls (the width of the last character read, a buffer that escapes shorten), and what parses,
//! where an expression ends and what every function gives follow from that state. So the scanner, the
//! parser and the functions below keep its structure and its order of operations; only the error values
//! say more (the line and what went wrong).
//!
//! Where envsubst would produce bytes that are not UTF-8 (a substring or trim that cuts a character) or
//! crash (a substring of negative length, which panics clusterctl), [`eval`] refuses with an error instead.

use std::fmt;

/// A piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    /// Text copied to the output, escapes resolved (bytes: envsubst's positions are byte offsets).
    Text(Vec<u8>),
    Func(Func),
}

/// `${param}` (no name, no arguments) or `${param<name><args…>}` / `${#param}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Func {
    pub param: String,
    /// The function as written: `:=`, `=`, `:-`, `:?`, `:+`, `,`, `,,`, `^`, `^^`, `#`, `##`, `%`, `%%`,
    /// `:`, `/`, `//`, `/#`, `/%`; empty for a plain `${param}`.
    pub name: String,
    pub args: Vec<Node>,
    /// Line of the expression's `${`, counting from 1, in the text given to [`parse`].
    pub line: usize,
}

/// Why envsubst refuses a template, as its parser tells: the first four are its own errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    BadSubstitution,
    MissingClosingBrace,
    VariableName,
    FuncSubstitution,
    DefaultFunction,
    /// Deeper than [`MAX_DEPTH`] nested expressions.
    TooDeep,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub kind: ErrorKind,
    /// Byte offset of the `${` of the expression that failed, in the text given to [`parse`].
    pub start: usize,
    /// Byte offset of the token the parser could not take (the text's length at its end).
    pub at: usize,
}

/// Expressions nested deeper than this are refused rather than risking the stack.
pub(crate) const MAX_DEPTH: usize = 200;

const EOF: char = '\0';

// Scanner modes (which tokens `scan` recognizes) and escapes.
const SCAN_IDENT: u8 = 1;
const SCAN_LBRACK: u8 = 2;
const SCAN_RBRACK: u8 = 4;
const SCAN_ESCAPE: u8 = 8;
const DOLLAR: u8 = 1;
const BACKSLASH: u8 = 2;
const ESCAPE_ALL: u8 = DOLLAR | BACKSLASH;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Illegal,
    Eof,
    Ident,
    Lbrack,
    Rbrack,
}

type Accept = fn(char, usize) -> bool;

/// Decodes one character the way Go's `utf8.DecodeRune` does: an invalid or cut sequence is U+FFFD,
/// one byte wide.
pub(crate) fn decode_rune(bytes: &[u8]) -> (char, usize) {
    let Some(&first) = bytes.first() else {
        return (char::REPLACEMENT_CHARACTER, 0);
    };
    let len = match first {
        0x00..=0x7f => 1,
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return (char::REPLACEMENT_CHARACTER, 1),
    };
    match bytes
        .get(..len)
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.chars().next())
    {
        Some(c) => (c, len),
        None => (char::REPLACEMENT_CHARACTER, 1),
    }
}

struct Scanner {
    buf: Vec<u8>,
    /// Where each byte of `buf` was in the text given: escapes remove bytes from `buf`.
    origin: Vec<usize>,
    pos: usize,
    start: usize,
    width: usize,
    mode: u8,
    escape_chars: u8,
    accept: Accept,
}

impl Scanner {
    fn read(&mut self) -> char {
        if self.pos >= self.buf.len() {
            self.width = 0;
            return EOF;
        }
        let (r, w) = decode_rune(&self.buf[self.pos..]);
        self.width = w;
        self.pos += w;
        r
    }

    fn unread(&mut self) {
        // envsubst steps back by the width of the last character read, which is not always the one
        // before the position; it never goes below the start of the buffer on input it accepts.
        self.pos = self.pos.saturating_sub(self.width);
    }

    /// Drops the byte before the position (the first of an escape pair).
    fn skip(&mut self) {
        self.buf.remove(self.pos - 1);
        self.origin.remove(self.pos - 1);
    }

    fn peek(&mut self) -> char {
        let r = self.read();
        self.unread();
        r
    }

    fn string(&self) -> Vec<u8> {
        self.buf
            .get(self.start..self.pos)
            .map_or_else(Vec::new, <[u8]>::to_vec)
    }

    fn should_escape(&self, character: u8) -> bool {
        self.escape_chars & character != 0
    }

    fn scan(&mut self) -> Token {
        self.start = self.pos;
        let r = self.read();
        if r == EOF {
            Token::Eof
        } else if self.scan_lbrack(r) {
            Token::Lbrack
        } else if self.scan_rbrack(r) {
            Token::Rbrack
        } else if self.scan_ident(r) {
            Token::Ident
        } else {
            Token::Illegal
        }
    }

    fn scan_ident(&mut self, r: char) -> bool {
        if self.mode & SCAN_IDENT == 0 {
            return false;
        }
        if self.scan_escaped(r) {
            self.skip();
        } else if !(self.accept)(r, self.pos - self.start) {
            return false;
        }
        loop {
            let r = self.read();
            if r == EOF {
                self.unread();
                break;
            }
            if self.scan_lbrack(r) {
                self.unread();
                self.unread();
                break;
            }
            if self.scan_escaped(r) {
                self.skip();
                continue;
            }
            if !(self.accept)(r, self.pos.wrapping_sub(self.start)) {
                self.unread();
                break;
            }
        }
        true
    }

    fn scan_lbrack(&mut self, r: char) -> bool {
        if self.mode & SCAN_LBRACK == 0 {
            return false;
        }
        if r == '$' {
            if self.read() == '{' {
                return true;
            }
            self.unread();
        }
        false
    }

    fn scan_rbrack(&self, r: char) -> bool {
        self.mode & SCAN_RBRACK != 0 && r == '}'
    }

    fn scan_escaped(&mut self, r: char) -> bool {
        if self.mode & SCAN_ESCAPE == 0 {
            return false;
        }
        if r == '$' && self.should_escape(DOLLAR) && self.peek() == '$' {
            return true;
        }
        if r == '\\' && self.should_escape(BACKSLASH) {
            return matches!(self.peek(), '/' | '\\');
        }
        false
    }
}

fn accept_rune(_: char, _: usize) -> bool {
    true
}
fn accept_ident(r: char, _: usize) -> bool {
    is_go_letter(r) || is_go_digit(r) || r == '_'
}
fn accept_colon(r: char, _: usize) -> bool {
    r == ':'
}
fn accept_one_hash(r: char, i: usize) -> bool {
    r == '#' && i == 1
}
fn accept_not_closing(r: char, _: usize) -> bool {
    r != '}'
}
fn accept_hash_func(r: char, i: usize) -> bool {
    r == '#' && i < 3
}
fn accept_percent_func(r: char, i: usize) -> bool {
    r == '%' && i < 3
}
fn accept_default_func(r: char, i: usize) -> bool {
    (i == 1 && r == ':') || (i == 2 && matches!(r, '=' | '-' | '?' | '+'))
}
fn accept_replace_func(r: char, i: usize) -> bool {
    (i == 1 && r == '/') || (i == 2 && matches!(r, '/' | '#' | '%'))
}
fn accept_one_equal(r: char, i: usize) -> bool {
    i == 1 && r == '='
}
fn accept_one_colon(r: char, i: usize) -> bool {
    i == 1 && r == ':'
}
fn reject_colon_close(r: char, _: usize) -> bool {
    r != ':' && r != '}'
}
fn accept_slash(r: char, _: usize) -> bool {
    r == '/'
}
fn accept_not_slash(r: char, _: usize) -> bool {
    r != '/'
}
fn accept_casing_func(r: char, i: usize) -> bool {
    (r == ',' || r == '^') && i < 3
}

/// Go's `unicode.IsLetter` (categories Lu, Ll, Lt, Lm, Lo; Rust's `is_alphabetic` also takes marks and
/// letter numbers).
fn is_go_letter(c: char) -> bool {
    use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};
    c.general_category_group() == GeneralCategoryGroup::Letter
}

/// Go's `unicode.IsDigit` (category Nd).
fn is_go_digit(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    c.general_category() == GeneralCategory::DecimalNumber
}

struct Parser {
    scanner: Scanner,
    /// Start (in `scanner.buf`) of the innermost expression being parsed, for errors and lines.
    expression: usize,
    depth: usize,
}

/// Parses `text` (after clusterctl's legacy rewrite) as envsubst does. `origin[i]` is the line of byte
/// `i` of `text`.
pub(crate) fn parse(text: &str, lines: &[usize]) -> Result<Vec<Node>, ParseError> {
    let mut parser = Parser {
        scanner: Scanner {
            buf: text.as_bytes().to_vec(),
            origin: (0..text.len()).collect(),
            pos: 0,
            start: 0,
            width: 0,
            mode: 0,
            escape_chars: 0,
            accept: accept_rune,
        },
        expression: 0,
        depth: 0,
    };
    let mut nodes = parser.parse_any()?;
    set_lines(&mut nodes, lines);
    Ok(nodes)
}

/// Turns the byte offsets [`Parser::new_func`] left in `line` into lines.
fn set_lines(nodes: &mut [Node], lines: &[usize]) {
    for node in nodes {
        if let Node::Func(func) = node {
            func.line = lines.get(func.line).or(lines.last()).copied().unwrap_or(1);
            set_lines(&mut func.args, lines);
        }
    }
}

impl Parser {
    fn error(&self, kind: ErrorKind) -> ParseError {
        let origin = |i: usize| {
            self.scanner
                .origin
                .get(i)
                .or(self.scanner.origin.last())
                .map_or(0, |o| *o + usize::from(i >= self.scanner.origin.len()))
        };
        ParseError {
            kind,
            start: origin(self.expression),
            at: origin(self.scanner.start),
        }
    }

    /// The text at the top level, to its end (envsubst's `parseAny`, as a loop).
    fn parse_any(&mut self) -> Result<Vec<Node>, ParseError> {
        let mut nodes = Vec::new();
        loop {
            self.scanner.accept = accept_rune;
            self.scanner.mode = SCAN_IDENT | SCAN_LBRACK | SCAN_ESCAPE;
            self.scanner.escape_chars = DOLLAR;
            match self.scanner.scan() {
                Token::Ident => nodes.push(Node::Text(self.scanner.string())),
                Token::Eof => return Ok(nodes),
                Token::Lbrack => nodes.push(self.parse_func()?),
                _ => return Err(self.error(ErrorKind::BadSubstitution)),
            }
        }
    }

    /// A `Func` whose `line` holds, until [`set_lines`], the byte offset of its `${`.
    fn new_func(&self, param: String) -> Func {
        Func {
            param,
            name: String::new(),
            args: Vec::new(),
            line: self
                .scanner
                .origin
                .get(self.expression)
                .copied()
                .unwrap_or(0),
        }
    }

    /// An expression, the scanner past its `${` (the token just scanned).
    fn parse_func(&mut self) -> Result<Node, ParseError> {
        let outer = self.expression;
        self.expression = self.scanner.start;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(ErrorKind::TooDeep));
        }
        let node = self.parse_func_inner()?;
        self.depth -= 1;
        self.expression = outer;
        Ok(Node::Func(node))
    }

    fn parse_func_inner(&mut self) -> Result<Func, ParseError> {
        self.scanner.escape_chars = ESCAPE_ALL;
        if self.scanner.peek() == '#' {
            return self.parse_len_func();
        }
        self.scanner.accept = accept_ident;
        self.scanner.mode = SCAN_IDENT;
        let name = match self.scanner.scan() {
            Token::Ident => String::from_utf8_lossy(&self.scanner.string()).into_owned(),
            _ => return Err(self.error(ErrorKind::VariableName)),
        };
        match self.scanner.peek() {
            ':' => return self.parse_default_or_substr(name),
            '=' => return self.parse_default_func(name),
            ',' | '^' => return self.parse_casing_func(name),
            '/' => return self.parse_replace_func(name),
            '#' => return self.parse_remove_func(name, accept_hash_func),
            '%' => return self.parse_remove_func(name, accept_percent_func),
            _ => {}
        }
        self.scanner.accept = accept_ident;
        self.scanner.mode = SCAN_RBRACK;
        match self.scanner.scan() {
            Token::Rbrack => Ok(self.new_func(name)),
            _ => Err(self.error(ErrorKind::MissingClosingBrace)),
        }
    }

    fn parse_param(&mut self, accept: Accept, mode: u8) -> Result<Node, ParseError> {
        self.scanner.accept = accept;
        self.scanner.mode = mode | SCAN_LBRACK;
        match self.scanner.scan() {
            Token::Lbrack => self.parse_func(),
            Token::Ident | Token::Rbrack => Ok(Node::Text(self.scanner.string())),
            _ => Err(self.error(ErrorKind::FuncSubstitution)),
        }
    }

    fn parse_default_or_substr(&mut self, name: String) -> Result<Func, ParseError> {
        self.scanner.read();
        let r = self.scanner.peek();
        self.scanner.unread();
        match r {
            '=' | '-' | '?' | '+' => self.parse_default_func(name),
            _ => self.parse_substr_func(name),
        }
    }

    /// The function's name: one token `accept` takes, else `kind`.
    fn scan_name(&mut self, accept: Accept, kind: ErrorKind) -> Result<String, ParseError> {
        self.scanner.accept = accept;
        self.scanner.mode = SCAN_IDENT;
        match self.scanner.scan() {
            Token::Ident => Ok(String::from_utf8_lossy(&self.scanner.string()).into_owned()),
            _ => Err(self.error(kind)),
        }
    }

    fn parse_substr_func(&mut self, param: String) -> Result<Func, ParseError> {
        let mut node = self.new_func(param);
        node.name = self.scan_name(accept_one_colon, ErrorKind::BadSubstitution)?;
        node.args
            .push(self.parse_param(reject_colon_close, SCAN_IDENT)?);
        self.scanner.accept = accept_colon;
        self.scanner.mode = SCAN_IDENT | SCAN_RBRACK;
        match self.scanner.scan() {
            Token::Rbrack => return Ok(node),
            Token::Ident => {}
            _ => return Err(self.error(ErrorKind::BadSubstitution)),
        }
        node.args
            .push(self.parse_param(accept_not_closing, SCAN_IDENT)?);
        self.consume_rbrack()?;
        Ok(node)
    }

    fn parse_remove_func(&mut self, param: String, accept: Accept) -> Result<Func, ParseError> {
        let mut node = self.new_func(param);
        node.name = self.scan_name(accept, ErrorKind::BadSubstitution)?;
        node.args
            .push(self.parse_param(accept_not_closing, SCAN_IDENT)?);
        self.consume_rbrack()?;
        Ok(node)
    }

    fn parse_replace_func(&mut self, param: String) -> Result<Func, ParseError> {
        let mut node = self.new_func(param);
        node.name = self.scan_name(accept_replace_func, ErrorKind::BadSubstitution)?;
        node.args
            .push(self.parse_param(accept_not_slash, SCAN_IDENT | SCAN_ESCAPE)?);
        self.scanner.accept = accept_slash;
        self.scanner.mode = SCAN_IDENT;
        if self.scanner.scan() != Token::Ident {
            return Err(self.error(ErrorKind::BadSubstitution));
        }
        if self.scanner.peek() == '}' {
            self.consume_rbrack()?;
            return Ok(node);
        }
        node.args
            .push(self.parse_param(accept_not_closing, SCAN_IDENT | SCAN_ESCAPE)?);
        self.consume_rbrack()?;
        Ok(node)
    }

    fn parse_default_func(&mut self, param: String) -> Result<Func, ParseError> {
        let mut node = self.new_func(param);
        let accept: Accept = if self.scanner.peek() == '=' {
            accept_one_equal
        } else {
            accept_default_func
        };
        node.name = self.scan_name(accept, ErrorKind::DefaultFunction)?;
        loop {
            if self.scanner.peek() == '}' {
                self.consume_rbrack()?;
                return Ok(node);
            }
            node.args
                .push(self.parse_param(accept_not_closing, SCAN_IDENT)?);
        }
    }

    fn parse_casing_func(&mut self, param: String) -> Result<Func, ParseError> {
        let mut node = self.new_func(param);
        node.name = self.scan_name(accept_casing_func, ErrorKind::BadSubstitution)?;
        self.consume_rbrack()?;
        Ok(node)
    }

    fn parse_len_func(&mut self) -> Result<Func, ParseError> {
        let mut node = self.new_func(String::new());
        node.name = self.scan_name(accept_one_hash, ErrorKind::BadSubstitution)?;
        node.param = self.scan_name(accept_ident, ErrorKind::BadSubstitution)?;
        self.consume_rbrack()?;
        Ok(node)
    }

    fn consume_rbrack(&mut self) -> Result<(), ParseError> {
        self.scanner.mode = SCAN_RBRACK;
        if self.scanner.scan() != Token::Rbrack {
            return Err(self.error(ErrorKind::BadSubstitution));
        }
        Ok(())
    }
}

/// What envsubst would do that is refused instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EvalError {
    /// Line of the expression.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Renders `nodes` with `lookup` (an unset variable is empty) as envsubst's `Execute` does.
pub(crate) fn eval<'a>(
    nodes: &[Node],
    lookup: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<u8>, EvalError> {
    let mut out = Vec::new();
    for node in nodes {
        match node {
            Node::Text(text) => out.extend_from_slice(text),
            Node::Func(func) => out.extend(eval_func(func, lookup)?),
        }
    }
    Ok(out)
}

fn eval_func<'a>(
    func: &Func,
    lookup: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<u8>, EvalError> {
    let mut args = Vec::with_capacity(func.args.len());
    for arg in &func.args {
        args.push(eval(std::slice::from_ref(arg), lookup)?);
    }
    let value = lookup(&func.param).unwrap_or("").as_bytes();
    let refuse = |message: String| EvalError {
        line: func.line,
        message,
    };
    let s = value;
    Ok(match (func.name.as_str(), args.len()) {
        (",", _) => map_first(s, Case::Lower).map_err(refuse)?,
        (",,", _) => map_all(s, Case::Lower).map_err(refuse)?,
        ("^", _) => map_first(s, Case::Upper).map_err(refuse)?,
        ("^^", _) => map_all(s, Case::Upper).map_err(refuse)?,
        ("#", 0) => s.len().to_string().into_bytes(),
        ("#", _) => trim_shortest_prefix(s, &args),
        ("##", _) => trim_longest_prefix(s, &args),
        ("%", _) => trim_shortest_suffix(s, &args),
        ("%%", _) => trim_longest_suffix(s, &args),
        (":", _) => {
            substr(s, &args).map_err(|m| refuse(format!("`${{{}:…}}`: {m}", func.param)))?
        }
        ("/#", _) => replace_prefix(s, &args),
        ("/%", _) => replace_suffix(s, &args),
        ("/", _) => replace_with(s, &args, Some(1)),
        ("//", _) => replace_with(s, &args, None),
        _ => to_default(s, &args),
    })
}

fn to_default(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    if s.is_empty() && !args.is_empty() {
        args.concat()
    } else {
        s.to_vec()
    }
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits that fit 64 bits.
fn atoi(s: &[u8]) -> Option<i64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

fn substr(s: &[u8], args: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    let Some(first) = args.first() else {
        return Ok(s.to_vec());
    };
    let Some(mut pos) = atoi(first) else {
        return Ok(s.to_vec());
    };
    let len = s.len() as i64;
    if pos < 0 {
        pos = (len + pos).max(0);
    }
    let rest = |pos: i64| {
        if pos < len {
            s[pos as usize..].to_vec()
        } else {
            Vec::new()
        }
    };
    let Some(second) = args.get(1) else {
        return Ok(rest(pos));
    };
    let Some(length) = atoi(second) else {
        return Ok(s.to_vec());
    };
    let end = pos.wrapping_add(length);
    if end >= len {
        return Ok(rest(pos));
    }
    if end < pos {
        // envsubst slices s[pos:end] and panics: clusterctl crashes.
        return Err(format!(
            "a negative length ({length}) that ends before the offset ({pos}) makes clusterctl's envsubst \
             panic; give a length of 0 or more"
        ));
    }
    Ok(s[pos as usize..end as usize].to_vec())
}

/// Go's `strings.Replace(s, old, new, n)`, on bytes; `n` None replaces all.
fn go_replace(s: &[u8], old: &[u8], new: &[u8], n: Option<usize>) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut done = 0;
    let mut i = 0;
    let limit = n.unwrap_or(usize::MAX);
    if old.is_empty() {
        // A match at the start and after each character (an invalid byte counts as one).
        while done < limit {
            out.extend_from_slice(new);
            done += 1;
            if i >= s.len() {
                return out;
            }
            let (_, width) = decode_rune(&s[i..]);
            out.extend_from_slice(&s[i..i + width]);
            i += width;
        }
        out.extend_from_slice(&s[i..]);
        return out;
    }
    while done < limit {
        let Some(found) = find(&s[i..], old) else {
            break;
        };
        out.extend_from_slice(&s[i..i + found]);
        out.extend_from_slice(new);
        i += found + old.len();
        done += 1;
    }
    out.extend_from_slice(&s[i..]);
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn replace_with(s: &[u8], args: &[Vec<u8>], n: Option<usize>) -> Vec<u8> {
    match args {
        [] => s.to_vec(),
        [old] => go_replace(s, old, b"", n),
        [old, new, ..] => go_replace(s, old, new, n),
    }
}

fn replace_prefix(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    match args {
        [old, new] if s.starts_with(old) => go_replace(s, old, new, Some(1)),
        _ => s.to_vec(),
    }
}

fn replace_suffix(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    match args {
        [old, new] if s.ends_with(old) => [&s[..s.len() - old.len()], new.as_slice()].concat(),
        _ => s.to_vec(),
    }
}

fn trim_shortest_prefix(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    match args.first() {
        Some(pattern) => trim_shortest(s, pattern),
        None => s.to_vec(),
    }
}

fn trim_longest_prefix(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    match args.first() {
        Some(pattern) => trim_longest(s, pattern),
        None => s.to_vec(),
    }
}

fn trim_shortest_suffix(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    match args.first() {
        Some(pattern) => reverse(&trim_shortest(&reverse(s), &reverse(pattern))),
        None => s.to_vec(),
    }
}

fn trim_longest_suffix(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    match args.first() {
        Some(pattern) => reverse(&trim_longest(&reverse(s), &reverse(pattern))),
        None => s.to_vec(),
    }
}

fn trim_shortest(s: &[u8], pattern: &[u8]) -> Vec<u8> {
    let mut shortest: &[u8] = &[];
    for i in 0..s.len() {
        let prefix = &s[..s.len() - i];
        match path_match(pattern, prefix) {
            Err(()) => return s.to_vec(),
            Ok(true) => shortest = prefix,
            Ok(false) => {}
        }
    }
    s[shortest.len()..].to_vec()
}

fn trim_longest(s: &[u8], pattern: &[u8]) -> Vec<u8> {
    for i in 0..s.len() {
        let prefix = &s[..s.len() - i];
        match path_match(pattern, prefix) {
            Err(()) => return s.to_vec(),
            Ok(true) => return s[prefix.len()..].to_vec(),
            Ok(false) => {}
        }
    }
    s.to_vec()
}

/// Go's `[]rune(s)` reversed and back to a string: an invalid byte becomes U+FFFD.
fn reverse(s: &[u8]) -> Vec<u8> {
    let mut chars = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let (c, width) = decode_rune(&s[i..]);
        chars.push(c);
        i += width;
    }
    chars.iter().rev().collect::<String>().into_bytes()
}

/// envsubst's copy of Go's `path.Match` (a trailing `*` matches the rest, `/` included); `Err` for a bad
/// pattern.
fn path_match(mut pattern: &[u8], mut name: &[u8]) -> Result<bool, ()> {
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            return Ok(true);
        }
        let (t, ok, err) = match_chunk(chunk, name);
        if ok && (t.is_empty() || !pattern.is_empty()) {
            name = t;
            continue;
        }
        if err {
            return Err(());
        }
        if star {
            for i in 0..name.len() {
                let (t, ok, err) = match_chunk(chunk, &name[i + 1..]);
                if ok {
                    if pattern.is_empty() && !t.is_empty() {
                        continue;
                    }
                    name = t;
                    continue 'pattern;
                }
                if err {
                    return Err(());
                }
            }
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

fn scan_chunk(mut pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let mut star = false;
    while pattern.first() == Some(&b'*') {
        pattern = &pattern[1..];
        star = true;
    }
    let mut in_range = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            b'\\' if i + 1 < pattern.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &pattern[..i], &pattern[i..])
}

/// Whether `chunk` matches the start of `s`: (the rest of `s`, matched, bad pattern).
fn match_chunk<'s>(mut chunk: &[u8], mut s: &'s [u8]) -> (&'s [u8], bool, bool) {
    while !chunk.is_empty() {
        if s.is_empty() {
            return (s, false, false);
        }
        match chunk[0] {
            b'[' => {
                let (r, n) = decode_rune(s);
                s = &s[n..];
                chunk = &chunk[1..];
                let mut not_negated = true;
                if chunk.first() == Some(&b'^') {
                    not_negated = false;
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if chunk.first() == Some(&b']') && ranges > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let Ok((lo, rest)) = get_esc(chunk) else {
                        return (s, false, true);
                    };
                    chunk = rest;
                    let mut hi = lo;
                    if chunk[0] == b'-' {
                        let Ok((h, rest)) = get_esc(&chunk[1..]) else {
                            return (s, false, true);
                        };
                        hi = h;
                        chunk = rest;
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched != not_negated {
                    return (s, false, false);
                }
            }
            b'?' => {
                let (_, n) = decode_rune(s);
                s = &s[n..];
                chunk = &chunk[1..];
            }
            first => {
                if first == b'\\' {
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        return (s, false, true);
                    }
                }
                if chunk[0] != s[0] {
                    return (s, false, false);
                }
                s = &s[1..];
                chunk = &chunk[1..];
            }
        }
    }
    (s, true, false)
}

/// A possibly escaped character of a character class, and the rest of the chunk (never empty).
fn get_esc(mut chunk: &[u8]) -> Result<(char, &[u8]), ()> {
    if chunk.is_empty() || chunk[0] == b'-' || chunk[0] == b']' {
        return Err(());
    }
    if chunk[0] == b'\\' {
        chunk = &chunk[1..];
        if chunk.is_empty() {
            return Err(());
        }
    }
    let (r, n) = decode_rune(chunk);
    let invalid = r == char::REPLACEMENT_CHARACTER && n == 1;
    let rest = &chunk[n..];
    if invalid || rest.is_empty() {
        return Err(());
    }
    Ok((r, rest))
}

#[derive(Clone, Copy)]
enum Case {
    Lower,
    Upper,
}

/// Go's `unicode.ToLower` / `unicode.ToUpper`: the simple (one character) case mapping. Where Unicode's
/// full mapping is several characters, the simple one is the character itself, but for the few listed.
fn simple_case(c: char, case: Case) -> char {
    let mut full: Vec<char> = match case {
        Case::Lower => c.to_lowercase().collect(),
        Case::Upper => c.to_uppercase().collect(),
    };
    if full.len() == 1 {
        return full.remove(0);
    }
    match (case, c as u32) {
        (Case::Lower, 0x130) => 'i',
        // Greek with ypogegrammeni: the small letters map to their title-case forms.
        (Case::Upper, 0x1f80..=0x1f87 | 0x1f90..=0x1f97 | 0x1fa0..=0x1fa7) => {
            char::from_u32(c as u32 + 8).unwrap_or(c)
        }
        (Case::Upper, 0x1fb3) => '\u{1fbc}',
        (Case::Upper, 0x1fc3) => '\u{1fcc}',
        (Case::Upper, 0x1ff3) => '\u{1ffc}',
        _ => c,
    }
}

fn map_all(s: &[u8], case: Case) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(s).map_err(|_| not_utf8())?;
    Ok(text
        .chars()
        .map(|c| simple_case(c, case))
        .collect::<String>()
        .into_bytes())
}

fn map_first(s: &[u8], case: Case) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(s).map_err(|_| not_utf8())?;
    let mut chars = text.chars();
    Ok(match chars.next() {
        Some(first) => std::iter::once(simple_case(first, case))
            .chain(chars)
            .collect::<String>()
            .into_bytes(),
        None => Vec::new(),
    })
}

fn not_utf8() -> String {
    "a case change of a value that is not UTF-8".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(text: &str, values: &[(&str, &str)]) -> Result<String, String> {
        let lines = vec![1; text.len()];
        let nodes = parse(text, &lines).map_err(|e| format!("{:?}", e.kind))?;
        let lookup = |name: &str| values.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        let bytes = eval(&nodes, &lookup).map_err(|e| e.message)?;
        Ok(String::from_utf8(bytes).unwrap())
    }

    #[test]
    fn string_functions_give_what_envsubst_gives() {
        let values = [("A", "hello.world.tar.gz"), ("E", ""), ("N", "Ärger")];
        let cases = [
            ("${#A}", "18"),
            ("${A^}", "Hello.world.tar.gz"),
            ("${A^^}", "HELLO.WORLD.TAR.GZ"),
            ("${N,}", "ärger"),
            ("${N,,}", "ärger"),
            ("${A:6}", "world.tar.gz"),
            ("${A:6:5}", "world"),
            // `:-` is a default, and an offset with a blank (`${A: -2}`) is no number: envsubst has no
            // negative offsets.
            ("${A:-2}", "hello.world.tar.gz"),
            ("${A: -2}", "hello.world.tar.gz"),
            ("${A:100}", ""),
            ("${A:x}", "hello.world.tar.gz"),
            ("${A#*.}", "world.tar.gz"),
            ("${A##*.}", "gz"),
            ("${A%.*}", "hello.world.tar"),
            ("${A%%.*}", "hello"),
            ("${A/o/0}", "hell0.world.tar.gz"),
            ("${A//o/0}", "hell0.w0rld.tar.gz"),
            ("${A/#hello/bye}", "bye.world.tar.gz"),
            ("${A/%gz/xz}", "hello.world.tar.xz"),
            ("${A//./}", "helloworldtargz"),
            ("${E:=d}", "d"),
            ("${E:-${A:0:5}}", "hello"),
            ("${E:+alt}", "alt"),
            ("${E:?msg}", "msg"),
            ("${A/\\//x}", "hello.world.tar.gz"),
            ("$${A}", "${A}"),
        ];
        for (text, want) in cases {
            assert_eq!(render(text, &values).as_deref(), Ok(want), "{text}");
        }
    }

    #[test]
    fn what_envsubst_refuses_is_refused_with_its_reason() {
        for (text, kind) in [
            ("${A", "MissingClosingBrace"),
            ("${}", "VariableName"),
            ("${A-x}", "MissingClosingBrace"),
            ("${A/x}", "BadSubstitution"),
            ("${A#}", "FuncSubstitution"),
        ] {
            assert_eq!(render(text, &[]).unwrap_err(), kind, "{text}");
        }
        assert!(
            render("${A:2:-1}", &[("A", "hello")])
                .unwrap_err()
                .contains("negative length")
        );
    }

    #[test]
    fn glob_matching_follows_go_path_match() {
        assert_eq!(path_match(b"*.gz", b"a.tar.gz"), Ok(true));
        assert_eq!(path_match(b"a?c", b"abc"), Ok(true));
        assert_eq!(path_match(b"[a-c]x", b"bx"), Ok(true));
        assert_eq!(path_match(b"[^a-c]x", b"bx"), Ok(false));
        assert_eq!(path_match(b"[", b"a"), Err(()));
        assert_eq!(path_match(b"a\\", b"a"), Ok(false));
    }

    #[test]
    fn go_decoding_of_cut_characters() {
        assert_eq!(decode_rune("é".as_bytes()), ('é', 2));
        assert_eq!(decode_rune(&"é".as_bytes()[..1]), ('\u{fffd}', 1));
        assert_eq!(decode_rune(&[0xed, 0xa0, 0x80]), ('\u{fffd}', 1));
    }
}
