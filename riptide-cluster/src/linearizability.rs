//! A linearizability checker for histories of reads and writes of registers, as the fault
//! tests record them against a cluster (Jepsen's model, Wing & Gong's search with Lowe's
//! memoization, as Porcupine and Knossos do it). Registers are independent, so each key's
//! history is checked on its own (linearizability is compositional).
//!
//! Invariants:
//! - An operation with a known outcome ([`Outcome::Ok`]) took effect at one instant between
//!   its invocation and its completion; one with an unknown outcome (a write whose reply was
//!   lost) took effect at one instant after its invocation, or never. Failed operations
//!   (definitely not applied) and reads with unknown outcomes constrain nothing: the caller
//!   leaves them out.
//! - The verdict [`Verdict::Linearizable`] is given only when an order was found;
//!   [`Verdict::Violation`] only when the search proved none exists; the search stops with
//!   [`Verdict::Inconclusive`] past its step budget instead of running unbounded.

use std::collections::{BTreeMap, HashSet};

/// What an operation did to its register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterOp {
    /// Read the register.
    Read,
    /// Wrote this value.
    Write(u64),
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Completed at `at`; a read returned `value` (`None`: the row was absent).
    Ok {
        /// When the reply arrived (same clock as invocations).
        at: u64,
        /// What a read returned (ignored for writes).
        value: Option<u64>,
    },
    /// A write whose outcome is unknown: it may have taken effect at any time after its
    /// invocation, or never.
    Unknown,
}

/// One operation of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// The register.
    pub key: u64,
    /// Read or write.
    pub op: RegisterOp,
    /// When it was invoked.
    pub invoked: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// The checker's answer for a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every key's operations have a linearization.
    Linearizable,
    /// This key's operations have none; `ops` are its operations in invocation order.
    Violation {
        /// The register.
        key: u64,
        /// Its operations.
        ops: Vec<Operation>,
    },
    /// The search for this key ran past its budget.
    Inconclusive {
        /// The register.
        key: u64,
    },
}

/// Search steps allowed per key.
const STEP_BUDGET: u64 = 20_000_000;

/// Checks `history`, where every register starts as `initial` (`None`: absent).
pub fn check(history: &[Operation], initial: Option<u64>) -> Verdict {
    let mut by_key: BTreeMap<u64, Vec<Operation>> = BTreeMap::new();
    for op in history {
        let useful = !matches!((op.op, op.outcome), (RegisterOp::Read, Outcome::Unknown));
        if useful {
            by_key.entry(op.key).or_default().push(*op);
        }
    }
    for (key, mut ops) in by_key {
        ops.sort_by_key(|o| o.invoked);
        match check_key(&ops, initial) {
            Some(true) => {}
            Some(false) => return Verdict::Violation { key, ops },
            None => return Verdict::Inconclusive { key },
        }
    }
    Verdict::Linearizable
}

/// One call or return event of the doubly linked event list.
#[derive(Clone, Copy)]
struct Event {
    op: usize,
    is_call: bool,
    prev: usize,
    next: usize,
}

const NIL: usize = usize::MAX;

/// The events of one key's operations, in time order (calls before returns at equal times:
/// the more permissive reading), behind a sentinel at index 0.
struct Events {
    events: Vec<Event>,
    /// Per operation: its call event and its return event (`NIL` for an unknown outcome).
    of_op: Vec<(usize, usize)>,
}

impl Events {
    fn new(ops: &[Operation]) -> Events {
        let mut times: Vec<(u64, bool, usize)> = Vec::new();
        for (i, o) in ops.iter().enumerate() {
            times.push((o.invoked, false, i));
            if let Outcome::Ok { at, .. } = o.outcome {
                times.push((at.max(o.invoked), true, i));
            }
        }
        // (time, is_return): false sorts first, so calls precede returns at equal times.
        times.sort();
        let mut events = vec![Event {
            op: NIL,
            is_call: false,
            prev: NIL,
            next: NIL,
        }];
        let mut of_op = vec![(NIL, NIL); ops.len()];
        for (_, is_return, op) in times {
            let index = events.len();
            let prev = index - 1;
            events[prev].next = index;
            events.push(Event {
                op,
                is_call: !is_return,
                prev,
                next: NIL,
            });
            if is_return {
                of_op[op].1 = index;
            } else {
                of_op[op].0 = index;
            }
        }
        Events { events, of_op }
    }

    fn unlink(&mut self, e: usize) {
        let (prev, next) = (self.events[e].prev, self.events[e].next);
        self.events[prev].next = next;
        if next != NIL {
            self.events[next].prev = prev;
        }
    }

    fn relink(&mut self, e: usize) {
        let (prev, next) = (self.events[e].prev, self.events[e].next);
        self.events[prev].next = e;
        if next != NIL {
            self.events[next].prev = e;
        }
    }

    /// Takes an operation's call and return out of the list.
    fn lift(&mut self, op: usize) {
        let (call, ret) = self.of_op[op];
        self.unlink(call);
        if ret != NIL {
            self.unlink(ret);
        }
    }

    /// Puts them back (in the reverse order of `lift`).
    fn unlift(&mut self, op: usize) {
        let (call, ret) = self.of_op[op];
        if ret != NIL {
            self.relink(ret);
        }
        self.relink(call);
    }
}

/// `Some(true)`: linearizable; `Some(false)`: not; `None`: over budget.
fn check_key(ops: &[Operation], initial: Option<u64>) -> Option<bool> {
    let mut list = Events::new(ops);
    let mut required = ops.iter().filter(|o| matches!(o.outcome, Outcome::Ok { .. })).count();
    let words = ops.len().div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut seen: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    let mut stack: Vec<(usize, Option<u64>)> = Vec::new();
    let mut state = initial;
    let mut entry = list.events[0].next;
    let mut steps = 0u64;
    loop {
        if required == 0 {
            return Some(true);
        }
        steps += 1;
        if steps > STEP_BUDGET {
            return None;
        }
        if entry == NIL {
            // Only calls of unknown writes are left and the required ops are not all placed:
            // cannot happen (every required op has a return event, which stops the scan).
            return Some(false);
        }
        let event = list.events[entry];
        if event.is_call {
            let op = &ops[event.op];
            let next_state = match op.op {
                RegisterOp::Write(v) => Some(Some(v)),
                RegisterOp::Read => match op.outcome {
                    Outcome::Ok { value, .. } if value == state => Some(state),
                    _ => None,
                },
            };
            if let Some(next_state) = next_state {
                linearized[event.op / 64] |= 1 << (event.op % 64);
                if seen.insert((linearized.clone(), next_state)) {
                    stack.push((event.op, state));
                    state = next_state;
                    if matches!(op.outcome, Outcome::Ok { .. }) {
                        required -= 1;
                    }
                    list.lift(event.op);
                    entry = list.events[0].next;
                    continue;
                }
                linearized[event.op / 64] &= !(1 << (event.op % 64));
            }
            entry = event.next;
        } else {
            // A return reached with its operation not placed: undo the last placement.
            let Some((op, previous)) = stack.pop() else {
                return Some(false);
            };
            state = previous;
            linearized[op / 64] &= !(1 << (op % 64));
            if matches!(ops[op].outcome, Outcome::Ok { .. }) {
                required += 1;
            }
            list.unlift(op);
            entry = list.events[list.of_op[op].0].next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(key: u64, v: u64, invoked: u64, at: u64) -> Operation {
        Operation {
            key,
            op: RegisterOp::Write(v),
            invoked,
            outcome: Outcome::Ok { at, value: None },
        }
    }

    fn r(key: u64, value: Option<u64>, invoked: u64, at: u64) -> Operation {
        Operation {
            key,
            op: RegisterOp::Read,
            invoked,
            outcome: Outcome::Ok { at, value },
        }
    }

    fn unknown_write(key: u64, v: u64, invoked: u64) -> Operation {
        Operation {
            key,
            op: RegisterOp::Write(v),
            invoked,
            outcome: Outcome::Unknown,
        }
    }

    #[test]
    fn sequential_and_concurrent_histories_that_linearize() {
        // w1; r->1; w2; r->2
        let h = [
            w(0, 1, 0, 10),
            r(0, Some(1), 20, 30),
            w(0, 2, 40, 50),
            r(0, Some(2), 60, 70),
        ];
        assert_eq!(check(&h, None), Verdict::Linearizable);
        // A read concurrent with a write may see either value.
        let h = [
            w(0, 1, 0, 10),
            w(0, 2, 20, 60),
            r(0, Some(1), 30, 40),
            r(0, Some(2), 50, 70),
        ];
        assert_eq!(check(&h, None), Verdict::Linearizable);
        // The initial state: absent.
        assert_eq!(check(&[r(0, None, 0, 5)], None), Verdict::Linearizable);
        assert_eq!(check(&[r(0, Some(0), 0, 5)], Some(0)), Verdict::Linearizable);
        // Keys are independent.
        let h = [
            w(0, 1, 0, 10),
            w(1, 2, 0, 10),
            r(1, Some(2), 20, 30),
            r(0, Some(1), 20, 30),
        ];
        assert_eq!(check(&h, None), Verdict::Linearizable);
    }

    #[test]
    fn a_stale_read_is_a_violation() {
        // w1 done, w2 done, then a read of 1: the read went back in time.
        let h = [w(0, 1, 0, 10), w(0, 2, 20, 30), r(0, Some(1), 40, 50)];
        assert!(matches!(check(&h, None), Verdict::Violation { key: 0, .. }));
    }

    #[test]
    fn a_lost_acknowledged_write_is_a_violation() {
        // w7 acknowledged, then reads see the value from before it.
        let h = [
            w(3, 1, 0, 10),
            w(3, 7, 20, 30),
            r(3, Some(1), 40, 50),
            r(3, Some(1), 60, 70),
        ];
        assert!(matches!(check(&h, None), Verdict::Violation { key: 3, .. }));
        // ... and so is a value nobody wrote.
        let h = [w(3, 1, 0, 10), r(3, Some(9), 20, 30)];
        assert!(matches!(check(&h, None), Verdict::Violation { key: 3, .. }));
    }

    #[test]
    fn unknown_writes_may_land_late_or_never() {
        // An unknown write seen by a read long after: it took effect late.
        let h = [
            w(0, 1, 0, 10),
            unknown_write(0, 2, 20),
            r(0, Some(1), 30, 40),
            r(0, Some(2), 100, 110),
        ];
        assert_eq!(check(&h, None), Verdict::Linearizable);
        // Never seen: it never took effect.
        let h = [w(0, 1, 0, 10), unknown_write(0, 2, 20), r(0, Some(1), 100, 110)];
        assert_eq!(check(&h, None), Verdict::Linearizable);
        // But it cannot take effect before it was invoked.
        let h = [r(0, Some(2), 0, 10), unknown_write(0, 2, 20)];
        assert!(matches!(check(&h, None), Verdict::Violation { .. }));
        // Nor flip back and forth: 1, 2, 1 with one write of each.
        let h = [
            w(0, 1, 0, 10),
            unknown_write(0, 2, 20),
            r(0, Some(2), 30, 40),
            r(0, Some(1), 50, 60),
        ];
        assert!(matches!(check(&h, None), Verdict::Violation { .. }));
    }

    #[test]
    fn many_concurrent_operations_check_quickly() {
        // 6 clients, 300 ops on one key, each write a new value, each read of the value of the
        // last completed write or a concurrent one: a serial history with overlaps.
        let mut h = Vec::new();
        let mut t = 0;
        let mut last = None;
        for i in 0..300u64 {
            if i % 3 == 0 {
                h.push(w(0, i, t, t + 25));
                last = Some(i);
            } else {
                h.push(r(0, last, t + 1, t + 20));
            }
            t += 10;
        }
        assert_eq!(check(&h, None), Verdict::Linearizable);
    }
}
