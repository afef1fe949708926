//! The syntax tree of a pattern expression: operators with the span of their token.
//!
//! The tree is *typed by construction*: after [`super::check`] accepts it, every node's
//! type follows from its operator alone ([`Node::ty`]), so later stages (the evaluator,
//! the constant folder and, later, a CUDA printer) never need a type table. Names are
//! resolved by the parser: a node is a literal, a built-in variable ([`Var`]) or an
//! operator; named constants of the file are already their values.

/// A byte range of the source: where the node's token (operator, keyword, literal or
/// name) was written. Error messages turn it into a line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

/// The two types of the language. Booleans are kept apart from integers so that
/// `q + (k < 3)` is a type error rather than C's silent 0/1 arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Int,
    Bool,
}

impl std::fmt::Display for Ty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ty::Int => "int",
            Ty::Bool => "bool",
        })
    }
}

/// A built-in integer variable. Which ones an expression may use depends on where it
/// stands ([`super::Scope`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Var {
    /// `b`: the batch row.
    Batch,
    /// `h`: the head, `0 <= h < H`.
    Head,
    /// `q`: the query position, `0 <= q < n`.
    Query,
    /// `k`: the key position, `0 <= k < n`.
    Key,
    /// `n`: the sequence length.
    SeqLen,
    /// `H`: the number of heads.
    Heads,
    /// `s`: the index of the query's segment in a dilated branch, `floor(q / w)`.
    SegmentIndex,
    /// `w`: the branch's segment length.
    Segment,
    /// `r`: the branch's dilation rate.
    Dilation,
}

impl Var {
    /// Every variable, in the order of their slots in [`super::Env`].
    pub const ALL: [Var; 9] = [
        Var::Batch,
        Var::Head,
        Var::Query,
        Var::Key,
        Var::SeqLen,
        Var::Heads,
        Var::SegmentIndex,
        Var::Segment,
        Var::Dilation,
    ];

    /// How the variable is written.
    pub fn name(self) -> &'static str {
        match self {
            Var::Batch => "b",
            Var::Head => "h",
            Var::Query => "q",
            Var::Key => "k",
            Var::SeqLen => "n",
            Var::Heads => "H",
            Var::SegmentIndex => "s",
            Var::Segment => "w",
            Var::Dilation => "r",
        }
    }

    /// The variable written `name`, if any.
    pub fn from_name(name: &str) -> Option<Var> {
        Var::ALL.into_iter().find(|v| v.name() == name)
    }

    /// Its slot in an [`super::Env`].
    pub fn slot(self) -> usize {
        self as usize
    }
}

/// A one-operand operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unary {
    /// `-x` (int).
    Neg,
    /// `!x` (bool).
    Not,
    /// `abs(x)` (int).
    Abs,
}

/// A two-operand operator (infix, or the functions `min` and `max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    /// Floor division.
    Div,
    /// The remainder of floor division (the sign of the divisor).
    Mod,
    Min,
    Max,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl Binary {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            Binary::Add => "+",
            Binary::Sub => "-",
            Binary::Mul => "*",
            Binary::Div => "/",
            Binary::Mod => "%",
            Binary::Min => "min",
            Binary::Max => "max",
            Binary::Eq => "==",
            Binary::Ne => "!=",
            Binary::Lt => "<",
            Binary::Le => "<=",
            Binary::Gt => ">",
            Binary::Ge => ">=",
            Binary::And => "&&",
            Binary::Or => "||",
        }
    }

    /// The type of the result (operand types are the type checker's business, `check.rs`).
    pub fn result(self) -> Ty {
        match self {
            Binary::Add | Binary::Sub | Binary::Mul | Binary::Div | Binary::Mod | Binary::Min | Binary::Max => Ty::Int,
            _ => Ty::Bool,
        }
    }
}

/// What a node computes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Int(i64),
    Bool(bool),
    Var(Var),
    Unary(Unary, Box<Node>),
    Binary(Binary, Box<Node>, Box<Node>),
    /// `if c then a else b`.
    If(Box<Node>, Box<Node>, Box<Node>),
}

/// One node: what it computes and where its token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: Kind,
    pub at: Span,
}

impl Node {
    pub fn new(kind: Kind, at: Span) -> Self {
        Node { kind, at }
    }

    /// The node's type, read off its operator. Meaningful for a tree that the type
    /// checker (`check.rs`) accepted (an `if` takes the type of its `then` branch).
    pub fn ty(&self) -> Ty {
        match &self.kind {
            Kind::Int(_) | Kind::Var(_) => Ty::Int,
            Kind::Bool(_) => Ty::Bool,
            Kind::Unary(Unary::Not, _) => Ty::Bool,
            Kind::Unary(_, _) => Ty::Int,
            Kind::Binary(op, _, _) => op.result(),
            Kind::If(_, then, _) => then.ty(),
        }
    }

    /// The node's operands, left to right.
    pub fn children(&self) -> Vec<&Node> {
        match &self.kind {
            Kind::Int(_) | Kind::Bool(_) | Kind::Var(_) => vec![],
            Kind::Unary(_, a) => vec![a],
            Kind::Binary(_, a, b) => vec![a, b],
            Kind::If(c, a, b) => vec![c, a, b],
        }
    }

    /// The conjuncts of the node (`a && b` flattened, left to right).
    pub fn conjuncts(&self) -> Vec<&Node> {
        match &self.kind {
            Kind::Binary(Binary::And, a, b) => {
                let mut out = a.conjuncts();
                out.extend(b.conjuncts());
                out
            }
            _ => vec![self],
        }
    }

    /// The number of nodes of the tree (what [`super::MAX_NODES`] limits).
    pub fn size(&self) -> usize {
        1 + self.children().iter().map(|c| c.size()).sum::<usize>()
    }
}
