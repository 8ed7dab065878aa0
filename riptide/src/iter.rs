//! Iterators over a sub-table: [`DbIterator`] (a cursor, like RocksDB's) and [`Iter`] (a Rust
//! double-ended iterator built on two cursors).
//!
//! Invariants:
//! - An iterator reads one [`MetaSnapshot`] (memtables and levels) at one snapshot LSN, fixed
//!   at creation: later writes, flushes and compactions are invisible to it, and it keeps its
//!   memtables and extents alive.
//! - Children are ordered newest source first: memtables newest first, then L0 layers newest
//!   first, then L1, then L2. For each user key the first child holding a version visible at
//!   the snapshot decides; a tombstone hides the key.
//! - The first error of a child (I/O, corruption) ends the iteration: the iterator becomes
//!   invalid and [`DbIterator::status`] returns the error.
//! - Keys returned satisfy `lower_bound <= key < upper_bound`.
//! - Forward mode: every child cursor is at the current key or past it; backward mode: at the
//!   current key or before it. Changing direction re-seeks the children.

use crate::error::{Error, Result};
use crate::extent_store::ExtentStore;
use crate::key::{Lsn, ValueKind};
use crate::memtable::MemtableCursor;
use crate::read::cursor::LevelCursor;
use crate::version::MetaSnapshot;
use crate::Snapshot;
use std::sync::Arc;

/// One source of the merge.
enum Child {
    Mem(MemtableCursor),
    Level(Box<LevelCursor>),
}

impl Child {
    fn valid(&self) -> bool {
        match self {
            Child::Mem(c) => c.valid(),
            Child::Level(c) => c.valid(),
        }
    }
    fn key(&self) -> &[u8] {
        match self {
            Child::Mem(c) => c.key(),
            Child::Level(c) => c.key(),
        }
    }
    fn version(&self, snapshot: Lsn) -> Option<(Lsn, ValueKind, &[u8])> {
        match self {
            Child::Mem(c) => c.version(snapshot),
            Child::Level(c) => c.version(),
        }
    }
    fn seek(&mut self, k: &[u8]) {
        match self {
            Child::Mem(c) => c.seek(k),
            Child::Level(c) => c.seek(k),
        }
    }
    fn seek_for_prev(&mut self, k: &[u8]) {
        match self {
            Child::Mem(c) => c.seek_for_prev(k),
            Child::Level(c) => c.seek_for_prev(k),
        }
    }
    fn seek_to_first(&mut self) {
        match self {
            Child::Mem(c) => c.seek_to_first(),
            Child::Level(c) => c.seek_to_first(),
        }
    }
    fn seek_to_last(&mut self) {
        match self {
            Child::Mem(c) => c.seek_to_last(),
            Child::Level(c) => c.seek_to_last(),
        }
    }
    fn next(&mut self) {
        match self {
            Child::Mem(c) => c.next(),
            Child::Level(c) => c.next(),
        }
    }
    fn prev(&mut self) {
        match self {
            Child::Mem(c) => c.prev(),
            Child::Level(c) => c.prev(),
        }
    }
    fn error(&self) -> Option<&Error> {
        match self {
            Child::Mem(_) => None,
            Child::Level(c) => c.error(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Backward,
}

/// A cursor over one table at one snapshot: `seek`, `seek_for_prev`, `next`, `prev`.
pub struct DbIterator {
    view: Arc<MetaSnapshot>,
    store: Arc<ExtentStore>,
    cursors: Vec<Child>,
    error: Option<Error>,
    snapshot: Lsn,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    direction: Direction,
    valid: bool,
    key: Vec<u8>,
    value: Vec<u8>,
    _pinned: Option<Snapshot>,
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator")
            .field("snapshot", &self.snapshot)
            .field("valid", &self.valid)
            .finish()
    }
}

impl DbIterator {
    pub(crate) fn new(
        view: Arc<MetaSnapshot>,
        store: Arc<ExtentStore>,
        snapshot: Lsn,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Self {
        let mut cursors: Vec<Child> = view
            .memtables()
            .filter(|m| m.min_lsn() <= snapshot)
            .map(|m| Child::Mem(m.cursor()))
            .collect();
        for layer in view.levels.layers() {
            if layer.extents.is_empty() || layer.extents.iter().all(|e| e.meta.min_lsn > snapshot) {
                continue;
            }
            cursors.push(Child::Level(Box::new(LevelCursor::new(
                store.clone(),
                layer.clone(),
                snapshot,
            ))));
        }
        DbIterator {
            view,
            store,
            cursors,
            error: None,
            snapshot,
            lower,
            upper,
            direction: Direction::Forward,
            valid: false,
            key: Vec::new(),
            value: Vec::new(),
            _pinned: None,
        }
    }

    /// Keeps a user's snapshot alive as long as the iterator.
    pub(crate) fn pin_snapshot(&mut self, snapshot: Option<Snapshot>) {
        self._pinned = snapshot;
    }

    /// An unpositioned copy reading the same memtables at the same snapshot and bounds.
    fn fresh_copy(&self) -> Self {
        let mut it = DbIterator::new(
            self.view.clone(),
            self.store.clone(),
            self.snapshot,
            self.lower.clone(),
            self.upper.clone(),
        );
        it._pinned = self._pinned.clone();
        it
    }

    /// True when positioned on an entry.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current key (empty when not valid).
    pub fn key(&self) -> &[u8] {
        if self.valid {
            &self.key
        } else {
            &[]
        }
    }

    /// The current value (empty when not valid).
    pub fn value(&self) -> &[u8] {
        if self.valid {
            &self.value
        } else {
            &[]
        }
    }

    /// The error that ended the iteration, if any (reading extents can fail with
    /// [`Error::Io`] or [`Error::Corruption`]; reading memtables cannot).
    pub fn status(&self) -> Result<()> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Stops on the first child error; true if there is one.
    fn check_errors(&mut self) -> bool {
        if self.error.is_none() {
            if let Some(e) = self.cursors.iter().find_map(|c| c.error()) {
                self.error = Some(e.clone());
            }
        }
        if self.error.is_some() {
            self.valid = false;
            return true;
        }
        false
    }

    /// Positions on the first key.
    pub fn seek_to_first(&mut self) {
        match self.lower.clone() {
            Some(l) => self.seek(&l),
            None => {
                self.cursors.iter_mut().for_each(|c| c.seek_to_first());
                self.direction = Direction::Forward;
                self.find_forward();
            }
        }
    }

    /// Positions on the last key.
    pub fn seek_to_last(&mut self) {
        match self.upper.clone() {
            Some(u) => {
                self.position_before(&u);
                self.direction = Direction::Backward;
                self.find_backward();
            }
            None => {
                self.cursors.iter_mut().for_each(|c| c.seek_to_last());
                self.direction = Direction::Backward;
                self.find_backward();
            }
        }
    }

    /// Positions on the first key >= `target`.
    pub fn seek(&mut self, target: &[u8]) {
        let target = match &self.lower {
            Some(l) if l.as_slice() > target => l.clone(),
            _ => target.to_vec(),
        };
        self.cursors.iter_mut().for_each(|c| c.seek(&target));
        self.direction = Direction::Forward;
        self.find_forward();
    }

    /// Positions on the last key <= `target`.
    pub fn seek_for_prev(&mut self, target: &[u8]) {
        match self.upper.clone() {
            Some(u) if target >= u.as_slice() => self.position_before(&u),
            _ => self.cursors.iter_mut().for_each(|c| c.seek_for_prev(target)),
        }
        self.direction = Direction::Backward;
        self.find_backward();
    }

    /// Moves to the next key.
    pub fn next(&mut self) {
        if !self.valid {
            return;
        }
        if self.direction == Direction::Backward {
            let key = self.key.clone();
            self.cursors.iter_mut().for_each(|c| c.seek(&key));
            self.direction = Direction::Forward;
        }
        self.step_past_current();
        self.find_forward();
    }

    /// Moves to the previous key.
    pub fn prev(&mut self) {
        if !self.valid {
            return;
        }
        if self.direction == Direction::Forward {
            let key = self.key.clone();
            self.cursors.iter_mut().for_each(|c| c.seek_for_prev(&key));
            self.direction = Direction::Backward;
        }
        self.step_past_current();
        self.find_backward();
    }

    /// Puts every cursor on the last key strictly below `bound`.
    fn position_before(&mut self, bound: &[u8]) {
        for c in &mut self.cursors {
            c.seek_for_prev(bound);
            if c.valid() && c.key() == bound {
                c.prev();
            }
        }
    }

    /// Moves every cursor sitting on `self.key` one step in the current direction.
    fn step_past_current(&mut self) {
        let forward = self.direction == Direction::Forward;
        for c in &mut self.cursors {
            if c.valid() && c.key() == self.key.as_slice() {
                if forward {
                    c.next();
                } else {
                    c.prev();
                }
            }
        }
    }

    /// Index of the cursor with the smallest (forward) or largest (backward) key.
    fn extreme(&self) -> Option<usize> {
        let forward = self.direction == Direction::Forward;
        let mut best: Option<usize> = None;
        for (i, c) in self.cursors.iter().enumerate() {
            if !c.valid() {
                continue;
            }
            best = match best {
                None => Some(i),
                Some(b) => {
                    let better = if forward {
                        c.key() < self.cursors[b].key()
                    } else {
                        c.key() > self.cursors[b].key()
                    };
                    Some(if better { i } else { b })
                }
            };
        }
        best
    }

    /// Loads the entry for the key at cursor `idx` into `self`; false if the key is deleted or
    /// has no version visible at the snapshot.
    fn resolve(&mut self, idx: usize) -> bool {
        self.key.clear();
        self.key.extend_from_slice(self.cursors[idx].key());
        for c in &self.cursors {
            if !c.valid() || c.key() != self.key.as_slice() {
                continue;
            }
            match c.version(self.snapshot) {
                Some((_, ValueKind::Put, v)) => {
                    self.value.clear();
                    self.value.extend_from_slice(v);
                    return true;
                }
                Some((_, ValueKind::Delete, _)) => return false,
                None => {}
            }
        }
        false
    }

    fn find_forward(&mut self) {
        loop {
            if self.check_errors() {
                return;
            }
            let Some(idx) = self.extreme() else {
                self.valid = false;
                return;
            };
            if let Some(u) = &self.upper {
                if self.cursors[idx].key() >= u.as_slice() {
                    self.valid = false;
                    return;
                }
            }
            if self.resolve(idx) {
                self.valid = true;
                return;
            }
            self.step_past_current();
        }
    }

    fn find_backward(&mut self) {
        loop {
            if self.check_errors() {
                return;
            }
            let Some(idx) = self.extreme() else {
                self.valid = false;
                return;
            };
            if let Some(l) = &self.lower {
                if self.cursors[idx].key() < l.as_slice() {
                    self.valid = false;
                    return;
                }
            }
            if self.resolve(idx) {
                self.valid = true;
                return;
            }
            self.step_past_current();
        }
    }
}

/// What [`Ends`] needs of a cursor (the table's [`DbIterator`] and a transaction's cursor).
pub(crate) trait EndsCursor {
    fn seek_to_first(&mut self);
    fn seek_to_last(&mut self);
    fn next(&mut self);
    fn prev(&mut self);
    fn valid(&self) -> bool;
    fn key(&self) -> &[u8];
    fn value(&self) -> &[u8];
    fn status(&self) -> Result<()>;
}

impl EndsCursor for DbIterator {
    fn seek_to_first(&mut self) {
        DbIterator::seek_to_first(self)
    }
    fn seek_to_last(&mut self) {
        DbIterator::seek_to_last(self)
    }
    fn next(&mut self) {
        DbIterator::next(self)
    }
    fn prev(&mut self) {
        DbIterator::prev(self)
    }
    fn valid(&self) -> bool {
        DbIterator::valid(self)
    }
    fn key(&self) -> &[u8] {
        DbIterator::key(self)
    }
    fn value(&self) -> &[u8] {
        DbIterator::value(self)
    }
    fn status(&self) -> Result<()> {
        DbIterator::status(self)
    }
}

/// Two cursors over the same view walking toward each other: the front from the first key,
/// the back from the last; they stop where they meet, so no key is returned twice. An error
/// ends both directions.
#[derive(Debug)]
pub(crate) struct Ends<C> {
    front: C,
    back: C,
    front_started: bool,
    back_started: bool,
    front_key: Option<Vec<u8>>,
    back_key: Option<Vec<u8>>,
    done: bool,
}

impl<C: EndsCursor> Ends<C> {
    pub(crate) fn new(front: C, back: C) -> Self {
        Ends {
            front,
            back,
            front_started: false,
            back_started: false,
            front_key: None,
            back_key: None,
            done: false,
        }
    }

    pub(crate) fn next(&mut self) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        if self.done {
            return None;
        }
        if self.front_started {
            self.front.next();
        } else {
            self.front.seek_to_first();
            self.front_started = true;
        }
        if let Err(e) = self.front.status() {
            self.done = true;
            return Some(Err(e));
        }
        let past_back = matches!(&self.back_key, Some(b) if self.front.key() >= b.as_slice());
        if !self.front.valid() || past_back {
            self.done = true;
            return None;
        }
        self.front_key = Some(self.front.key().to_vec());
        Some(Ok((self.front.key().to_vec(), self.front.value().to_vec())))
    }

    pub(crate) fn next_back(&mut self) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        if self.done {
            return None;
        }
        if self.back_started {
            self.back.prev();
        } else {
            self.back.seek_to_last();
            self.back_started = true;
        }
        if let Err(e) = self.back.status() {
            self.done = true;
            return Some(Err(e));
        }
        let past_front = matches!(&self.front_key, Some(f) if self.back.key() <= f.as_slice());
        if !self.back.valid() || past_front {
            self.done = true;
            return None;
        }
        self.back_key = Some(self.back.key().to_vec());
        Some(Ok((self.back.key().to_vec(), self.back.value().to_vec())))
    }
}

/// A Rust iterator over `(key, value)` pairs of a table ([`crate::Table::iter`]).
/// Double-ended: the front and back meet in the middle without repeating a key.
#[derive(Debug)]
pub struct Iter {
    ends: Ends<DbIterator>,
}

impl Iter {
    pub(crate) fn new(front: DbIterator) -> Self {
        let back = front.fresh_copy();
        Iter {
            ends: Ends::new(front, back),
        }
    }
}

impl Iterator for Iter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.ends.next()
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.ends.next_back()
    }
}
