//! Iterators of a transaction: the table at the transaction's read view (a [`DbIterator`],
//! the *base*) with the transaction's own buffered writes (the *delta*) merged over it.
//!
//! Invariants:
//! - The delta is a sorted copy of the buffered writes of one table inside the iterator's
//!   bounds, taken when the iterator was created; the base has the same bounds.
//! - A key present in both comes from the delta; a buffered delete hides the base's key.
//! - Moving forward, the base is on the first base key not yet passed and `d` on the first
//!   delta entry not yet passed; the current entry is the smaller of the two. Backward is the
//!   mirror image. A change of direction re-seeks both sides to the current key first.
//! - An error of the base makes the cursor invalid and is reported by `status`.

use crate::error::Result;
use crate::iter::{DbIterator, Ends, EndsCursor};
use crate::txn::buffer::Pending;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Forward,
    Backward,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Current {
    None,
    Base,
    /// The delta entry at `d`; `shadows` when the base is on the same key.
    Delta {
        shadows: bool,
    },
}

/// A positioned cursor over one table as the transaction sees it: `seek`, `seek_for_prev`,
/// `next`, `prev` (the same API as [`DbIterator`]).
pub struct TxnCursor {
    base: DbIterator,
    delta: Vec<(Vec<u8>, Pending)>,
    /// Index into `delta`; backward, `-1` is before the start.
    d: isize,
    dir: Dir,
    cur: Current,
}

impl std::fmt::Debug for TxnCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnCursor")
            .field("own_writes", &self.delta.len())
            .field("valid", &self.valid())
            .finish()
    }
}

impl TxnCursor {
    pub(crate) fn new(base: DbIterator, delta: Vec<(Vec<u8>, Pending)>) -> Self {
        TxnCursor {
            base,
            delta,
            d: 0,
            dir: Dir::Forward,
            cur: Current::None,
        }
    }

    fn delta_at(&self, i: isize) -> Option<&(Vec<u8>, Pending)> {
        usize::try_from(i).ok().and_then(|i| self.delta.get(i))
    }

    /// True when positioned on an entry.
    pub fn valid(&self) -> bool {
        self.cur != Current::None
    }

    /// The current key (empty when not valid).
    pub fn key(&self) -> &[u8] {
        match self.cur {
            Current::None => &[],
            Current::Base => self.base.key(),
            Current::Delta { .. } => self.delta_at(self.d).map_or(&[], |e| &e.0),
        }
    }

    /// The current value (empty when not valid).
    pub fn value(&self) -> &[u8] {
        match self.cur {
            Current::None => &[],
            Current::Base => self.base.value(),
            Current::Delta { .. } => self.delta_at(self.d).and_then(|e| e.1.as_deref()).unwrap_or(&[]),
        }
    }

    /// The error that ended the iteration, if any (from reading the table).
    pub fn status(&self) -> Result<()> {
        self.base.status()
    }

    /// Positions on the first key.
    pub fn seek_to_first(&mut self) {
        self.base.seek_to_first();
        self.d = 0;
        self.dir = Dir::Forward;
        self.settle_forward();
    }

    /// Positions on the last key.
    pub fn seek_to_last(&mut self) {
        self.base.seek_to_last();
        self.d = self.delta.len() as isize - 1;
        self.dir = Dir::Backward;
        self.settle_backward();
    }

    /// Positions on the first key >= `target`.
    pub fn seek(&mut self, target: &[u8]) {
        self.base.seek(target);
        // The delta holds only keys inside the bounds, so no clamping is needed here.
        self.d = self.delta.partition_point(|e| e.0.as_slice() < target) as isize;
        self.dir = Dir::Forward;
        self.settle_forward();
    }

    /// Positions on the last key <= `target`.
    pub fn seek_for_prev(&mut self, target: &[u8]) {
        self.base.seek_for_prev(target);
        self.d = self.delta.partition_point(|e| e.0.as_slice() <= target) as isize - 1;
        self.dir = Dir::Backward;
        self.settle_backward();
    }

    /// Moves to the next key.
    pub fn next(&mut self) {
        if !self.valid() {
            return;
        }
        if self.dir == Dir::Backward {
            let key = self.key().to_vec();
            self.seek(&key);
            if !self.valid() {
                return;
            }
        }
        match self.cur {
            Current::None => return,
            Current::Base => self.base.next(),
            Current::Delta { shadows } => {
                self.d += 1;
                if shadows {
                    self.base.next();
                }
            }
        }
        self.settle_forward();
    }

    /// Moves to the previous key.
    pub fn prev(&mut self) {
        if !self.valid() {
            return;
        }
        if self.dir == Dir::Forward {
            let key = self.key().to_vec();
            self.seek_for_prev(&key);
            if !self.valid() {
                return;
            }
        }
        match self.cur {
            Current::None => return,
            Current::Base => self.base.prev(),
            Current::Delta { shadows } => {
                self.d -= 1;
                if shadows {
                    self.base.prev();
                }
            }
        }
        self.settle_backward();
    }

    /// Picks the smaller of base and delta, skipping buffered deletes (and the keys they hide).
    fn settle_forward(&mut self) {
        loop {
            if self.base.status().is_err() {
                self.cur = Current::None;
                return;
            }
            let base = self.base.valid().then(|| self.base.key());
            let Some((dk, dv)) = self.delta_at(self.d) else {
                self.cur = if base.is_some() { Current::Base } else { Current::None };
                return;
            };
            match base {
                Some(b) if b < dk.as_slice() => {
                    self.cur = Current::Base;
                    return;
                }
                _ => {
                    let shadows = base == Some(dk.as_slice());
                    if dv.is_some() {
                        self.cur = Current::Delta { shadows };
                        return;
                    }
                    self.d += 1;
                    if shadows {
                        self.base.next();
                    }
                }
            }
        }
    }

    /// Picks the larger of base and delta, skipping buffered deletes (and the keys they hide).
    fn settle_backward(&mut self) {
        loop {
            if self.base.status().is_err() {
                self.cur = Current::None;
                return;
            }
            let base = self.base.valid().then(|| self.base.key());
            let Some((dk, dv)) = self.delta_at(self.d) else {
                self.cur = if base.is_some() { Current::Base } else { Current::None };
                return;
            };
            match base {
                Some(b) if b > dk.as_slice() => {
                    self.cur = Current::Base;
                    return;
                }
                _ => {
                    let shadows = base == Some(dk.as_slice());
                    if dv.is_some() {
                        self.cur = Current::Delta { shadows };
                        return;
                    }
                    self.d -= 1;
                    if shadows {
                        self.base.prev();
                    }
                }
            }
        }
    }
}

/// A Rust iterator over `(key, value)` pairs of a table as the transaction sees it
/// ([`crate::Txn::iter`]). Double-ended: the front and back meet without repeating a key.
#[derive(Debug)]
pub struct TxnIter {
    ends: Ends<TxnCursor>,
}

impl TxnIter {
    pub(crate) fn new(front: TxnCursor, back: TxnCursor) -> Self {
        TxnIter {
            ends: Ends::new(front, back),
        }
    }
}

impl Iterator for TxnIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.ends.next()
    }
}

impl DoubleEndedIterator for TxnIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.ends.next_back()
    }
}

impl EndsCursor for TxnCursor {
    fn seek_to_first(&mut self) {
        TxnCursor::seek_to_first(self)
    }
    fn seek_to_last(&mut self) {
        TxnCursor::seek_to_last(self)
    }
    fn next(&mut self) {
        TxnCursor::next(self)
    }
    fn prev(&mut self) {
        TxnCursor::prev(self)
    }
    fn valid(&self) -> bool {
        TxnCursor::valid(self)
    }
    fn key(&self) -> &[u8] {
        TxnCursor::key(self)
    }
    fn value(&self) -> &[u8] {
        TxnCursor::value(self)
    }
    fn status(&self) -> Result<()> {
        TxnCursor::status(self)
    }
}
