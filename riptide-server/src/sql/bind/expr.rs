//! Binding of sqlparser expressions: names to column positions, literals to values, `?` to
//! parameter numbers in textual order, session functions and `@@variables` to constants.
//!
//! Invariant: anything outside the supported subset is a 1235 error naming the construct,
//! never a silently different expression.

use crate::sql::error::{SqlError, SqlResult};
use crate::sql::expr::{BinOp, Expr, Func};
use crate::sql::plan::{AggFunc, Aggregate};
use crate::sql::schema::TableSchema;
use crate::sql::session_vars::{system_variable, SessionView};
use crate::value::{Decimal, Value};
use sqlparser::ast::{self, BinaryOperator, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator};
use sqlparser::tokenizer::Location;

/// Binding state of one statement.
pub struct ExprBinder<'a> {
    /// The table whose columns names resolve to, if any.
    pub schema: Option<&'a TableSchema>,
    /// The table's alias, accepted as a qualifier.
    pub alias: Option<String>,
    /// The session (for DATABASE(), @@variables, ...).
    pub session: &'a SessionView,
    /// Locations of the `?`s met so far, by slot.
    pub params: Vec<Location>,
    /// Aggregates met (only where allowed).
    pub aggregates: Option<Vec<Aggregate>>,
}

impl<'a> ExprBinder<'a> {
    /// A binder over `schema` (or none).
    pub fn new(schema: Option<&'a TableSchema>, session: &'a SessionView) -> Self {
        ExprBinder {
            schema,
            alias: None,
            session,
            params: Vec::new(),
            aggregates: None,
        }
    }

    /// The mapping from slot to textual parameter number, and the count.
    pub fn param_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.params.len()).collect();
        order.sort_by_key(|&i| (self.params[i].line, self.params[i].column));
        let mut rank = vec![0; self.params.len()];
        for (r, &slot) in order.iter().enumerate() {
            rank[slot] = r;
        }
        rank
    }

    /// A column by (possibly qualified) name.
    pub fn column(&self, parts: &[ast::Ident]) -> SqlResult<Expr> {
        let name = &parts.last().expect("identifiers are non-empty").value;
        let schema = self
            .schema
            .ok_or_else(|| SqlError::no_such_column(name, "field list"))?;
        if parts.len() > 1 {
            let q = &parts[parts.len() - 2].value;
            let ok = q == &schema.name || self.alias.as_deref() == Some(q.as_str());
            if !ok || (parts.len() > 2 && parts[parts.len() - 3].value != schema.db) {
                let full: Vec<&str> = parts.iter().map(|p| p.value.as_str()).collect();
                return Err(SqlError::no_such_column(&full.join("."), "where clause"));
            }
        }
        schema
            .column(name)
            .map(Expr::Col)
            .ok_or_else(|| SqlError::no_such_column(name, "field list"))
    }

    /// Binds an expression.
    pub fn bind(&mut self, e: &ast::Expr) -> SqlResult<Expr> {
        use ast::Expr as A;
        Ok(match e {
            A::Identifier(id) => {
                if let Some(var) = id.value.strip_prefix("@@") {
                    return self.variable(var);
                }
                self.column(std::slice::from_ref(id))?
            }
            A::CompoundIdentifier(parts) => {
                if parts.first().is_some_and(|p| p.value.starts_with("@@")) {
                    let name = parts.last().map(|p| p.value.as_str()).unwrap_or_default();
                    return self.variable(name);
                }
                self.column(parts)?
            }
            A::Value(v) => self.value(&v.value, v.span.start)?,
            A::Nested(inner) => self.bind(inner)?,
            A::UnaryOp { op, expr } => match op {
                UnaryOperator::Minus => match self.bind(expr)? {
                    Expr::Lit(Value::Int(i)) => Expr::Lit(Value::Int(-i)),
                    Expr::Lit(Value::UInt(u)) if u == 1 << 63 => Expr::Lit(Value::Int(i64::MIN)),
                    other => Expr::Neg(Box::new(other)),
                },
                UnaryOperator::Plus => self.bind(expr)?,
                UnaryOperator::Not => Expr::Not(Box::new(self.bind(expr)?)),
                other => return Err(SqlError::unsupported(format!("unary operator {other}"))),
            },
            A::BinaryOp { left, op, right } => {
                let op = match op {
                    BinaryOperator::Plus => BinOp::Add,
                    BinaryOperator::Minus => BinOp::Sub,
                    BinaryOperator::Multiply => BinOp::Mul,
                    BinaryOperator::Divide => BinOp::Div,
                    BinaryOperator::MyIntegerDivide => BinOp::IntDiv,
                    BinaryOperator::Modulo => BinOp::Mod,
                    BinaryOperator::Eq => BinOp::Eq,
                    BinaryOperator::NotEq => BinOp::NotEq,
                    BinaryOperator::Lt => BinOp::Lt,
                    BinaryOperator::LtEq => BinOp::LtEq,
                    BinaryOperator::Gt => BinOp::Gt,
                    BinaryOperator::GtEq => BinOp::GtEq,
                    BinaryOperator::Spaceship => BinOp::NullSafeEq,
                    BinaryOperator::And => BinOp::And,
                    BinaryOperator::Or => BinOp::Or,
                    BinaryOperator::Xor => BinOp::Xor,
                    other => return Err(SqlError::unsupported(format!("operator {other}"))),
                };
                let l = self.bind(left)?;
                let r = self.bind(right)?;
                Expr::Bin(op, Box::new(l), Box::new(r))
            }
            A::IsNull(x) => Expr::IsNull(Box::new(self.bind(x)?), false),
            A::IsNotNull(x) => Expr::IsNull(Box::new(self.bind(x)?), true),
            A::IsTrue(x) => Expr::Bin(
                BinOp::NullSafeEq,
                Box::new(Expr::Not(Box::new(Expr::Not(Box::new(self.bind(x)?))))),
                Box::new(Expr::Lit(Value::Int(1))),
            ),
            A::IsFalse(x) => Expr::Bin(
                BinOp::NullSafeEq,
                Box::new(Expr::Not(Box::new(self.bind(x)?))),
                Box::new(Expr::Lit(Value::Int(1))),
            ),
            A::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let e = self.bind(expr)?;
                let lo = self.bind(low)?;
                let hi = self.bind(high)?;
                Expr::Between(Box::new(e), Box::new(lo), Box::new(hi), *negated)
            }
            A::InList { expr, list, negated } => {
                let e = self.bind(expr)?;
                let l = list.iter().map(|x| self.bind(x)).collect::<SqlResult<Vec<_>>>()?;
                Expr::InList(Box::new(e), l, *negated)
            }
            A::Like {
                negated,
                expr,
                pattern,
                escape_char,
                any,
            } => {
                if escape_char.is_some() || *any {
                    return Err(SqlError::unsupported("LIKE ... ESCAPE"));
                }
                let e = self.bind(expr)?;
                let p = self.bind(pattern)?;
                Expr::Like(Box::new(e), Box::new(p), *negated)
            }
            A::Function(f) => self.function(f)?,
            other => return Err(SqlError::unsupported(truncate(&other.to_string()))),
        })
    }

    fn value(&mut self, v: &ast::Value, at: Location) -> SqlResult<Expr> {
        use ast::Value as V;
        Ok(Expr::Lit(match v {
            V::Number(n, _) => number(n)?,
            V::SingleQuotedString(s) | V::DoubleQuotedString(s) => Value::Bytes(s.as_bytes().to_vec()),
            V::Boolean(b) => Value::Int(*b as i64),
            V::Null => Value::Null,
            V::HexStringLiteral(h) => Value::Bytes(hex(h)?),
            V::Placeholder(p) if p == "?" => {
                self.params.push(at);
                return Ok(Expr::Param(self.params.len() - 1));
            }
            other => return Err(SqlError::unsupported(format!("literal {other}"))),
        }))
    }

    fn variable(&self, name: &str) -> SqlResult<Expr> {
        let name = name.trim_start_matches("@@");
        let name = name
            .strip_prefix("session.")
            .or_else(|| name.strip_prefix("global."))
            .or_else(|| name.strip_prefix("local."))
            .unwrap_or(name);
        system_variable(name, self.session)
            .map(Expr::Lit)
            .ok_or_else(|| SqlError::unknown_variable(name))
    }

    fn function(&mut self, f: &ast::Function) -> SqlResult<Expr> {
        let name = f.name.to_string().to_ascii_uppercase();
        let (args, distinct, star) = match &f.args {
            FunctionArguments::None => (Vec::new(), false, false),
            FunctionArguments::List(l) => {
                let mut out = Vec::new();
                let mut star = false;
                for a in &l.args {
                    match a {
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => out.push(e.clone()),
                        FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => star = true,
                        other => return Err(SqlError::unsupported(format!("function argument {other}"))),
                    }
                }
                let distinct = matches!(l.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct));
                (out, distinct, star)
            }
            FunctionArguments::Subquery(_) => return Err(SqlError::unsupported("subquery")),
        };
        let agg = match name.as_str() {
            "COUNT" => Some(AggFunc::Count),
            "SUM" => Some(AggFunc::Sum),
            "MIN" => Some(AggFunc::Min),
            "MAX" => Some(AggFunc::Max),
            "AVG" => Some(AggFunc::Avg),
            _ => None,
        };
        if let Some(func) = agg {
            if self.aggregates.is_none() {
                return Err(SqlError::new(1111, "HY000", "Invalid use of group function"));
            }
            let arg = match (star, args.as_slice()) {
                (true, []) if func == AggFunc::Count => None,
                (false, [a]) => {
                    let saved = self.aggregates.take();
                    let bound = self.bind(a);
                    self.aggregates = saved;
                    Some(bound?)
                }
                _ => return Err(SqlError::syntax(format!("wrong arguments to {name}"))),
            };
            let list = self.aggregates.as_mut().expect("checked above");
            list.push(Aggregate { func, arg, distinct });
            return Ok(Expr::Agg(list.len() - 1));
        }
        if distinct || star {
            return Err(SqlError::syntax(format!("wrong arguments to {name}")));
        }
        let session_const = match name.as_str() {
            "DATABASE" | "SCHEMA" => Some(self.session.db.clone().map(Value::from_string).unwrap_or(Value::Null)),
            "VERSION" => Some(Value::str(&self.session.version)),
            "CONNECTION_ID" => Some(Value::Int(self.session.connection_id as i64)),
            "LAST_INSERT_ID" if args.is_empty() => Some(Value::UInt(self.session.last_insert_id)),
            "USER" | "CURRENT_USER" | "SESSION_USER" | "SYSTEM_USER" => {
                Some(Value::from_string(format!("{}@localhost", self.session.user)))
            }
            "NOW" | "CURRENT_TIMESTAMP" | "SYSDATE" | "LOCALTIME" | "LOCALTIMESTAMP" => {
                Some(Value::DateTime(self.session.now))
            }
            _ => None,
        };
        if let Some(v) = session_const {
            return Ok(Expr::Lit(v));
        }
        let func = match name.as_str() {
            "CONCAT" => Func::Concat,
            "LENGTH" | "OCTET_LENGTH" => Func::Length,
            "CHAR_LENGTH" | "CHARACTER_LENGTH" => Func::CharLength,
            "UPPER" | "UCASE" => Func::Upper,
            "LOWER" | "LCASE" => Func::Lower,
            "ABS" => Func::Abs,
            "COALESCE" => Func::Coalesce,
            "IFNULL" => Func::IfNull,
            "IF" => Func::If,
            _ => return Err(SqlError::unsupported(format!("function {name}"))),
        };
        let want = match func {
            Func::Length | Func::CharLength | Func::Upper | Func::Lower | Func::Abs => Some(1),
            Func::IfNull => Some(2),
            Func::If => Some(3),
            Func::Concat | Func::Coalesce => None,
        };
        if want.is_some_and(|n| n != args.len()) || args.is_empty() {
            return Err(SqlError::new(
                1582,
                "42000",
                format!("Incorrect parameter count in the call to native function '{name}'"),
            ));
        }
        let bound = args.iter().map(|a| self.bind(a)).collect::<SqlResult<Vec<_>>>()?;
        Ok(Expr::Func(func, bound))
    }
}

/// Rewrites `Param(slot)` to `Param(rank[slot])`.
pub fn renumber(e: &mut Expr, rank: &[usize]) {
    match e {
        Expr::Param(p) => *p = rank[*p],
        Expr::Lit(_) | Expr::Col(_) | Expr::Agg(_) => {}
        Expr::Neg(x) | Expr::Not(x) | Expr::IsNull(x, _) => renumber(x, rank),
        Expr::Bin(_, a, b) | Expr::Like(a, b, _) => {
            renumber(a, rank);
            renumber(b, rank);
        }
        Expr::Between(a, b, c, _) => {
            renumber(a, rank);
            renumber(b, rank);
            renumber(c, rank);
        }
        Expr::InList(x, l, _) => {
            renumber(x, rank);
            l.iter_mut().for_each(|y| renumber(y, rank));
        }
        Expr::Func(_, args) => args.iter_mut().for_each(|y| renumber(y, rank)),
    }
}

/// A numeric literal: an integer when it has no point or exponent, a DECIMAL with a point,
/// a DOUBLE with an exponent.
pub fn number(n: &str) -> SqlResult<Value> {
    if let Ok(i) = n.parse::<i64>() {
        return Ok(Value::Int(i));
    }
    if let Ok(u) = n.parse::<u64>() {
        return Ok(Value::UInt(u));
    }
    if !n.contains(['e', 'E']) {
        if let Some(d) = Decimal::parse(n) {
            return Ok(Value::Decimal(d));
        }
    }
    n.parse::<f64>()
        .map(Value::Double)
        .map_err(|_| SqlError::syntax(format!("bad number '{}'", truncate(n))))
}

fn hex(h: &str) -> SqlResult<Vec<u8>> {
    let h = if h.len() % 2 == 1 {
        format!("0{h}")
    } else {
        h.to_string()
    };
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|_| SqlError::syntax("bad hex literal")))
        .collect()
}

/// At most 64 characters of a statement fragment, for messages.
pub fn truncate(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}
