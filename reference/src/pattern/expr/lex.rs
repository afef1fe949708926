//! The lexer: source text to tokens with byte spans (winnow over a located `&str`).
//!
//! Tokens are decimal integer literals, identifiers (keywords among them), and the
//! punctuation `( ) , + - * / % == != < <= > >= && || !`. Whitespace (space, tab,
//! carriage return, newline) separates tokens and is otherwise ignored, so an expression
//! may span several lines of a TOML multi-line string; errors count lines and columns.

use super::ast::Span;
use super::error::{ExprError, Pos, token_text};
use winnow::ascii::{digit1, multispace0};
use winnow::combinator::{alt, repeat, terminated};
use winnow::error::ContextError;
use winnow::prelude::*;
use winnow::stream::{LocatingSlice, Stream};
use winnow::token::{one_of, take_while};

/// What a token is. Identifiers carry no text: the parser reads it from the span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tok {
    Int(i64),
    Name,
    If,
    Then,
    Else,
    True,
    False,
    Min,
    Max,
    Abs,
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    AndAnd,
    OrOr,
    Bang,
    /// The end of the input (always the last token, so every error has a "found").
    End,
}

/// The words that are not names.
pub const KEYWORDS: [&str; 8] = ["if", "then", "else", "true", "false", "min", "max", "abs"];

/// A token and where it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub at: Span,
}

/// The span of one token's text: a number, a word, a two-character operator (tried
/// before its one-character prefix) or a one-character one.
fn token_span(input: &mut LocatingSlice<&str>) -> ModalResult<std::ops::Range<usize>> {
    let word = (one_of(|c: char| c.is_ascii_alphabetic() || c == '_'), take_while(0.., is_word_char));
    alt((
        digit1.void(),
        word.void(),
        alt(("==", "!=", "<=", ">=", "&&", "||")).void(),
        one_of(['(', ')', ',', '+', '-', '*', '/', '%', '<', '>', '!']).void(),
    ))
    .span()
    .parse_next(input)
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `name` is an identifier (what a constant's name must be).
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(is_word_char)
}

/// What the token spelled `text` is; `None` for an integer literal above `i64::MAX`.
fn classify(text: &str) -> Option<Tok> {
    Some(match text {
        "if" => Tok::If,
        "then" => Tok::Then,
        "else" => Tok::Else,
        "true" => Tok::True,
        "false" => Tok::False,
        "min" => Tok::Min,
        "max" => Tok::Max,
        "abs" => Tok::Abs,
        "(" => Tok::LParen,
        ")" => Tok::RParen,
        "," => Tok::Comma,
        "+" => Tok::Plus,
        "-" => Tok::Minus,
        "*" => Tok::Star,
        "/" => Tok::Slash,
        "%" => Tok::Percent,
        "==" => Tok::EqEq,
        "!=" => Tok::NotEq,
        "<" => Tok::Lt,
        "<=" => Tok::Le,
        ">" => Tok::Gt,
        ">=" => Tok::Ge,
        "&&" => Tok::AndAnd,
        "||" => Tok::OrOr,
        "!" => Tok::Bang,
        digits if digits.starts_with(|c: char| c.is_ascii_digit()) => Tok::Int(digits.parse().ok()?),
        _ => Tok::Name,
    })
}

/// The tokens of `source`, ending with [`Tok::End`].
pub fn lex(source: &str) -> Result<Vec<Token>, ExprError> {
    let mut input = LocatingSlice::new(source);
    let spans: Vec<std::ops::Range<usize>> = (multispace0, repeat(0.., terminated(token_span, multispace0)))
        .map(|(_, spans)| spans)
        .parse_next(&mut input)
        .map_err(|_: winnow::error::ErrMode<ContextError>| unexpected(source, 0))?;
    if input.eof_offset() > 0 {
        return Err(unexpected(source, source.len() - input.eof_offset()));
    }
    let mut tokens = Vec::with_capacity(spans.len() + 1);
    for range in spans {
        let at = Span { start: range.start, end: range.end };
        let text = token_text(source, at);
        let tok = classify(&text).ok_or(ExprError::BadLiteral { at: Pos::of(source, at.start), literal: text })?;
        tokens.push(Token { tok, at });
    }
    tokens.push(Token { tok: Tok::End, at: Span { start: source.len(), end: source.len() } });
    Ok(tokens)
}

/// The error for the character at byte `offset`, which starts no token.
fn unexpected(source: &str, offset: usize) -> ExprError {
    let found = source[offset..].chars().next().unwrap_or(' ');
    ExprError::UnexpectedChar { at: Pos::of(source, offset), found }
}
