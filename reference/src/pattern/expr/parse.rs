//! The parser: tokens to a [`Node`] tree (winnow over a [`TokenSlice`]).
//!
//! Precedence climbing, one function per level, loosest first:
//!
//! ```text
//!   expr    := or
//!   or      := and ('||' and)*
//!   and     := cmp ('&&' cmp)*
//!   cmp     := sum (('==' | '!=' | '<' | '<=' | '>' | '>=') sum)?    (no chains)
//!   sum     := term (('+' | '-') term)*
//!   term    := unary (('*' | '/' | '%') unary)*
//!   unary   := ('-' | '!') unary | atom
//!   atom    := INT | 'true' | 'false' | NAME | '(' expr ')'
//!            | ('min' | 'max') '(' expr ',' expr ')' | 'abs' '(' expr ')'
//!            | 'if' expr 'then' expr 'else' expr
//! ```
//!
//! Binary operators associate to the left. An `if` is an atom whose `else` branch
//! extends as far right as possible (as in Haskell or OCaml): `if c then 1 else 2 + 3`
//! is `if c then 1 else (2 + 3)`. Every failure is a cut error at the offending token,
//! so the message names that token and what was expected there.

use super::MAX_DEPTH;
use super::ast::{Binary, Kind, Node, Span, Unary};
use super::error::{ExprError, Pos, token_text};
use super::lex::{Tok, Token};
use super::scope::Names;
use winnow::combinator::{cut_err, fail, opt};
use winnow::error::{ContextError, ErrMode};
use winnow::prelude::*;
use winnow::stream::{Stream, TokenSlice};
use winnow::token::any;

type Tokens<'t> = TokenSlice<'t, Token>;
type PResult<T> = ModalResult<T, ContextError<Expect>>;

/// What the parser wanted where it failed (the context of its error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Token(&'static str),
    Operand,
    End,
    KnownName,
    Shallower,
}

/// The parser's state: the source (for names) and how deep it is nested.
#[derive(Debug, Clone, Copy)]
struct Cx<'a> {
    source: &'a str,
    names: Names<'a>,
    depth: usize,
}

impl Cx<'_> {
    fn deeper(self) -> Self {
        Cx { depth: self.depth + 1, ..self }
    }
}

/// Parse `tokens` (from [`super::lex::lex`] on `source`) into a tree, resolving names.
pub(super) fn parse(source: &str, tokens: &[Token], names: Names<'_>) -> Result<Node, ExprError> {
    let cx = Cx { source, names, depth: 0 };
    let whole = (|i: &mut Tokens<'_>| expr(i, cx), cut_err(token(Tok::End)).context(Expect::End));
    whole.map(|(node, _)| node).parse(Tokens::new(tokens)).map_err(|e| {
        let found = tokens[e.offset().min(tokens.len() - 1)];
        let at = Pos::of(source, found.at.start);
        let text = token_text(source, found.at);
        let quoted = if found.tok == Tok::End { "end of input".to_string() } else { format!("'{text}'") };
        let syntax = |expected| ExprError::Syntax { at, expected, found: quoted.clone() };
        match e.inner().context().next() {
            Some(Expect::Token(t)) => syntax(t),
            Some(Expect::Operand) | None => {
                syntax("an operand (a number, a name, '(', '-', '!', 'if', min, max or abs)")
            }
            Some(Expect::End) => syntax("an operator or the end of the expression"),
            Some(Expect::KnownName) => ExprError::UnknownName { at, name: text, known: names.known() },
            Some(Expect::Shallower) => ExprError::TooDeep { at, token: text, limit: MAX_DEPTH },
        }
    })
}

/// One token of kind `tok`.
fn token<'t>(tok: Tok) -> impl Parser<Tokens<'t>, &'t Token, ErrMode<ContextError<Expect>>> {
    any.verify(move |t: &&Token| t.tok == tok)
}

/// Token `tok`, or a cut error saying it was expected (`shown` as in the message).
fn expect<'t>(i: &mut Tokens<'t>, tok: Tok, shown: &'static str) -> PResult<&'t Token> {
    cut_err(token(tok)).context(Expect::Token(shown)).parse_next(i)
}

/// A cut error at the current token.
fn error<T>(i: &mut Tokens<'_>, why: Expect) -> PResult<T> {
    cut_err(fail).context(why).parse_next(i)
}

fn expr(i: &mut Tokens<'_>, cx: Cx<'_>) -> PResult<Node> {
    if cx.depth > MAX_DEPTH {
        return error(i, Expect::Shallower);
    }
    chain(i, cx, &[(Tok::OrOr, Binary::Or)], and)
}

fn and(i: &mut Tokens<'_>, cx: Cx<'_>) -> PResult<Node> {
    chain(i, cx, &[(Tok::AndAnd, Binary::And)], cmp)
}

const COMPARISONS: [(Tok, Binary); 6] = [
    (Tok::EqEq, Binary::Eq),
    (Tok::NotEq, Binary::Ne),
    (Tok::Lt, Binary::Lt),
    (Tok::Le, Binary::Le),
    (Tok::Gt, Binary::Gt),
    (Tok::Ge, Binary::Ge),
];

fn cmp(i: &mut Tokens<'_>, cx: Cx<'_>) -> PResult<Node> {
    let lhs = sum(i, cx)?;
    match opt(operator(&COMPARISONS)).parse_next(i)? {
        Some((op, at)) => Ok(Node::new(Kind::Binary(op, Box::new(lhs), Box::new(sum(i, cx)?)), at)),
        None => Ok(lhs),
    }
}

fn sum(i: &mut Tokens<'_>, cx: Cx<'_>) -> PResult<Node> {
    chain(i, cx, &[(Tok::Plus, Binary::Add), (Tok::Minus, Binary::Sub)], term)
}

fn term(i: &mut Tokens<'_>, cx: Cx<'_>) -> PResult<Node> {
    chain(i, cx, &[(Tok::Star, Binary::Mul), (Tok::Slash, Binary::Div), (Tok::Percent, Binary::Mod)], unary)
}

/// One of the binary operators `ops` and its token's span.
fn operator<'t>(
    ops: &'static [(Tok, Binary)],
) -> impl Parser<Tokens<'t>, (Binary, Span), ErrMode<ContextError<Expect>>> {
    any.verify_map(move |t: &Token| ops.iter().find(|(tok, _)| *tok == t.tok).map(|&(_, op)| (op, t.at)))
}

/// `next (op next)*` for the operators `ops`, folded to the left.
fn chain<'t, 'a>(
    i: &mut Tokens<'t>,
    cx: Cx<'a>,
    ops: &'static [(Tok, Binary)],
    next: fn(&mut Tokens<'t>, Cx<'a>) -> PResult<Node>,
) -> PResult<Node> {
    let mut lhs = next(i, cx)?;
    while let Some((op, at)) = opt(operator(ops)).parse_next(i)? {
        let rhs = next(i, cx)?;
        lhs = Node::new(Kind::Binary(op, Box::new(lhs), Box::new(rhs)), at);
    }
    Ok(lhs)
}

fn unary(i: &mut Tokens<'_>, cx: Cx<'_>) -> PResult<Node> {
    let prefix = any.verify_map(|t: &Token| match t.tok {
        Tok::Minus => Some((Unary::Neg, t.at)),
        Tok::Bang => Some((Unary::Not, t.at)),
        _ => None,
    });
    match opt(prefix).parse_next(i)? {
        Some((op, at)) => {
            let cx = cx.deeper();
            if cx.depth > MAX_DEPTH {
                return error(i, Expect::Shallower);
            }
            Ok(Node::new(Kind::Unary(op, Box::new(unary(i, cx)?)), at))
        }
        None => atom(i, cx),
    }
}

fn atom(i: &mut Tokens<'_>, cx: Cx<'_>) -> PResult<Node> {
    let start = i.checkpoint();
    let t = *any.parse_next(i)?;
    let node = |kind| Ok(Node::new(kind, t.at));
    match t.tok {
        Tok::Int(value) => node(Kind::Int(value)),
        Tok::True => node(Kind::Bool(true)),
        Tok::False => node(Kind::Bool(false)),
        Tok::Name => match cx.names.lookup(&token_text(cx.source, t.at)) {
            Some(kind) => node(kind),
            None => {
                i.reset(&start);
                error(i, Expect::KnownName)
            }
        },
        Tok::LParen => {
            let inner = expr(i, cx.deeper())?;
            expect(i, Tok::RParen, "')'")?;
            Ok(inner)
        }
        Tok::Min | Tok::Max => {
            expect(i, Tok::LParen, "'('")?;
            let a = expr(i, cx.deeper())?;
            expect(i, Tok::Comma, "','")?;
            let b = expr(i, cx.deeper())?;
            expect(i, Tok::RParen, "')'")?;
            let op = if t.tok == Tok::Min { Binary::Min } else { Binary::Max };
            node(Kind::Binary(op, Box::new(a), Box::new(b)))
        }
        Tok::Abs => {
            expect(i, Tok::LParen, "'('")?;
            let a = expr(i, cx.deeper())?;
            expect(i, Tok::RParen, "')'")?;
            node(Kind::Unary(Unary::Abs, Box::new(a)))
        }
        Tok::If => {
            let c = expr(i, cx.deeper())?;
            expect(i, Tok::Then, "'then'")?;
            let a = expr(i, cx.deeper())?;
            expect(i, Tok::Else, "'else'")?;
            let b = expr(i, cx.deeper())?;
            node(Kind::If(Box::new(c), Box::new(a), Box::new(b)))
        }
        _ => {
            i.reset(&start);
            error(i, Expect::Operand)
        }
    }
}
