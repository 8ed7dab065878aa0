//! [`InflightWrites`]: the writes this node proposed that openraft has not answered yet, each
//! with the term it was proposed in (shared by the replicator and the state machine).
//!
//! openraft 0.9 never answers a write whose log entry a snapshot install purged without
//! truncating it: the responder stays queued for an index this node will not apply. After an
//! install up to index S:
//! - a write proposed in a term of which no entry is left after S had its entry at or below S
//!   (entries of this node's past leadership are truncated, and answered, or purged): it is
//!   settled at once, as of unknown outcome;
//! - a write proposed in a term with entries left after S is answered by openraft when its
//!   entry applies, unless its entry was at or below S: once the apply passed the last entry
//!   of that term, whatever of that term is still waiting is settled the same way.
//!
//! Invariants:
//! - A write is settled once: whoever takes it out of the registry (the waiting task, with
//!   openraft's answer, or a settlement here) settles it.
//! - The writes of one log entry (a group) are registered under one lock and share one task:
//!   a settlement by term takes all of them or none, so their task is aborted only when none
//!   is left to answer.
//! - No engine callback runs under the registry's lock (answers and settlements run after it
//!   is released), so a callback may propose a write.
//! - Settling a write by its term is safe because every proposal carries a fence of the term
//!   it was proposed in (or of its reads): an entry committed under another term is refused on
//!   every replica.

use parking_lot::Mutex;
use riptide::replication::ReplicationDone;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// One write's completion, taken by whoever settles it.
type Slot = Arc<Mutex<Option<ReplicationDone>>>;

/// The registry (see the module header).
#[derive(Default)]
pub struct InflightWrites {
    inner: Mutex<Inflight>,
}

#[derive(Default)]
struct Inflight {
    next: u64,
    /// Id → (term proposed in, completion).
    writes: HashMap<u64, (u64, Slot)>,
    /// The tasks waiting on openraft for each write (aborted when the write is settled here:
    /// openraft would keep them waiting for good).
    tasks: HashMap<u64, tokio::task::AbortHandle>,
    /// Terms with entries left after an installed snapshot → the last such entry's index.
    watched: BTreeMap<u64, u64>,
}

fn overtaken() -> riptide::Error {
    riptide::Error::Replication(
        "a snapshot from a newer leader overtook this write's log entry; the outcome is unknown".into(),
    )
}

impl InflightWrites {
    /// Registers a write proposed in `term`; returns its id.
    #[cfg(test)]
    pub(crate) fn add(&self, term: u64, done: ReplicationDone) -> u64 {
        self.add_all(term, vec![done])[0]
    }

    /// Registers the writes of one log entry, proposed in `term`, under one lock (so that a
    /// settlement by term finds all of them or none); returns their ids in order.
    pub(crate) fn add_all(&self, term: u64, dones: Vec<ReplicationDone>) -> Vec<u64> {
        let mut inner = self.inner.lock();
        dones
            .into_iter()
            .map(|done| {
                let id = inner.next;
                inner.next += 1;
                inner.writes.insert(id, (term, Arc::new(Mutex::new(Some(done)))));
                id
            })
            .collect()
    }

    /// Tells the writer `result` now (the write keeps what it holds until settled). The
    /// writer's callback runs under the write's own slot lock, not the registry's.
    pub(crate) fn answer(&self, id: u64, result: riptide::Result<()>) {
        let slot = self.inner.lock().writes.get(&id).map(|(_, slot)| slot.clone());
        if let Some(slot) = slot {
            if let Some(done) = slot.lock().as_mut() {
                done.answer(result);
            }
        }
    }

    /// Takes write `id` out (for its task to settle with openraft's answer); `None` if it was
    /// settled here already.
    pub(crate) fn take(&self, id: u64) -> Option<ReplicationDone> {
        let slot = {
            let mut inner = self.inner.lock();
            inner.tasks.remove(&id);
            inner.writes.remove(&id).map(|(_, slot)| slot)
        };
        slot.and_then(|s| s.lock().take())
    }

    /// Records the task waiting for write `id`, or aborts it if the write was settled already.
    #[cfg(test)]
    pub(crate) fn set_task(&self, id: u64, task: tokio::task::AbortHandle) {
        self.set_task_all(&[id], task);
    }

    /// Records the one task waiting for the writes `ids` (registered together by
    /// [`InflightWrites::add_all`]), or aborts it if none of them is left: a settlement takes
    /// them all at once (they share a term), so either all are here or none.
    pub(crate) fn set_task_all(&self, ids: &[u64], task: tokio::task::AbortHandle) {
        let mut inner = self.inner.lock();
        let mut recorded = false;
        for id in ids {
            if inner.writes.contains_key(id) {
                inner.tasks.insert(*id, task.clone());
                recorded = true;
            }
        }
        if !recorded {
            task.abort();
        }
    }

    /// Writes not yet answered.
    pub fn len(&self) -> usize {
        self.inner.lock().writes.len()
    }

    /// True when no write waits for openraft.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// After a snapshot install: `live` holds, for each term with entries left in the log after
    /// the snapshot, the index of its last one. Settles every write of another term now, and
    /// watches the live terms (see [`InflightWrites::settle_applied_before`]). Returns how
    /// many writes it settled.
    pub fn settle_overtaken(&self, live: &BTreeMap<u64, u64>) -> usize {
        let slots = {
            let mut inner = self.inner.lock();
            for (term, last) in live {
                let watched = inner.watched.entry(*term).or_insert(*last);
                *watched = (*watched).max(*last);
            }
            Self::remove_where(&mut inner, |term| !live.contains_key(&term))
        };
        Self::settle(slots)
    }

    /// Before applying entries from index `next`: a watched term whose last entry is below
    /// `next` was applied in an earlier call, so its writes still waiting had their entries at
    /// or below a snapshot; they are settled. Returns how many.
    pub fn settle_applied_before(&self, next: u64) -> usize {
        let slots = {
            let mut inner = self.inner.lock();
            if inner.watched.is_empty() {
                return 0;
            }
            let done: Vec<u64> = inner
                .watched
                .iter()
                .filter(|(_, last)| **last < next)
                .map(|(term, _)| *term)
                .collect();
            for term in &done {
                inner.watched.remove(term);
            }
            Self::remove_where(&mut inner, |term| done.contains(&term))
        };
        Self::settle(slots)
    }

    /// Takes out the writes of the terms `settle` names (aborting their tasks).
    fn remove_where(inner: &mut Inflight, settle: impl Fn(u64) -> bool) -> Vec<Slot> {
        let Inflight { writes, tasks, .. } = inner;
        let mut slots = Vec::new();
        writes.retain(|id, (term, slot)| {
            if !settle(*term) {
                return true;
            }
            if let Some(task) = tasks.remove(id) {
                task.abort();
            }
            slots.push(slot.clone());
            false
        });
        slots
    }

    fn settle(slots: Vec<Slot>) -> usize {
        let mut n = 0;
        for slot in slots {
            let done = slot.lock().take();
            if let Some(done) = done {
                done.settle(Err(overtaken()));
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use riptide::replication::{ReplicatedWrites, Replicator};
    use riptide::{Db, Options, WriteBatch, WriteOptions};

    /// A replicator that hands each write's completion to the test.
    struct Capture(std::sync::mpsc::Sender<ReplicationDone>);

    impl Replicator for Capture {
        fn replicate(&self, _writes: ReplicatedWrites, done: ReplicationDone) {
            self.0.send(done).unwrap();
        }
    }

    /// `n` writes proposed to `db`'s replicator: their handles and completions.
    fn writes(
        db: &Db,
        rx: &std::sync::mpsc::Receiver<ReplicationDone>,
        n: u8,
    ) -> Vec<(riptide::WriteHandle, ReplicationDone)> {
        (0..n)
            .map(|i| {
                let mut batch = WriteBatch::new();
                batch.put(&db.default_table(), &[i], b"v").unwrap();
                let handle = db.write_async(batch, &WriteOptions::default());
                (handle, rx.recv().unwrap())
            })
            .collect()
    }

    #[tokio::test]
    async fn writes_are_settled_by_term_once_and_watched_terms_after_their_last_entry() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        db.set_replicator(Arc::new(Capture(tx))).unwrap();
        let registry = InflightWrites::default();
        let mut handles = Vec::new();
        let mut ids = Vec::new();
        for ((handle, done), term) in writes(&db, &rx, 4).into_iter().zip([5, 5, 6, 7]) {
            ids.push(registry.add(term, done));
            handles.push(handle);
        }
        let parked = tokio::spawn(std::future::pending::<()>());
        registry.set_task(ids[0], parked.abort_handle());

        // Term 5 has no entry left after the snapshot: both its writes are settled (and the
        // task waiting on one is aborted); terms 6 and 7 are watched.
        assert_eq!(registry.settle_overtaken(&BTreeMap::from([(6, 40), (7, 50)])), 2);
        assert!(parked.await.unwrap_err().is_cancelled());
        assert_eq!(registry.len(), 2);
        assert!(registry.take(ids[0]).is_none(), "settled once");
        let mut handles = handles.into_iter();
        for _ in 0..2 {
            let err = handles.next().unwrap().wait().unwrap_err();
            assert!(err.to_string().contains("overtook"), "{err}");
        }

        // openraft answers the term-6 write: it is its task's to settle, not the registry's.
        registry.answer(ids[2], Ok(()));
        let done = registry.take(ids[2]).expect("not settled yet");
        done.settle(Ok(()));
        handles.next().unwrap().wait().unwrap();

        // Term 7's last entry (50) applies; a later apply settles what of term 7 still waits.
        assert_eq!(registry.settle_applied_before(50), 0);
        assert_eq!(registry.settle_applied_before(51), 1);
        assert!(registry.is_empty());
        assert!(handles.next().unwrap().wait().is_err());

        // A task recorded after its write was settled is aborted at once.
        let late = tokio::spawn(std::future::pending::<()>());
        registry.set_task(ids[3], late.abort_handle());
        assert!(late.await.unwrap_err().is_cancelled());
    }

    /// The writes of one entry (a group) are settled together: a settlement by term takes all
    /// of them, and their shared task is aborted only once none is left; while one is left,
    /// recording the task keeps it.
    #[tokio::test]
    async fn a_groups_writes_are_settled_together_and_share_their_task() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        db.set_replicator(Arc::new(Capture(tx))).unwrap();
        let registry = InflightWrites::default();
        let (handles, dones): (Vec<_>, Vec<_>) = writes(&db, &rx, 5).into_iter().unzip();
        let mut dones = dones.into_iter();
        let group: Vec<ReplicationDone> = dones.by_ref().take(3).collect();
        let ids = registry.add_all(9, group);
        let other = registry.add_all(10, dones.collect());
        assert_eq!(ids.len(), 3);
        assert_eq!(registry.len(), 5);

        // The task answering the group is kept while any of its writes is left...
        let task = tokio::spawn(std::future::pending::<()>());
        registry.answer(ids[0], Ok(()));
        registry.take(ids[0]).unwrap().settle(Ok(()));
        registry.set_task_all(&ids, task.abort_handle());
        // (An abort would have ended the task by the time this sleep is over.)
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!task.is_finished(), "the group's task was aborted with writes left");
        // ...and a snapshot that overtakes the entry's term settles the rest of it at once,
        // aborting the task.
        assert_eq!(registry.settle_overtaken(&BTreeMap::from([(10, 70)])), 2);
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(registry.len(), 2);
        let mut handles = handles.into_iter();
        handles.next().unwrap().wait().unwrap();
        for _ in 0..2 {
            let err = handles.next().unwrap().wait().unwrap_err();
            assert!(err.to_string().contains("overtook"), "{err}");
        }

        // A task recorded after every write of its group was settled is aborted at once.
        let late = tokio::spawn(std::future::pending::<()>());
        registry.set_task_all(&ids, late.abort_handle());
        assert!(late.await.unwrap_err().is_cancelled());
        for id in other {
            registry.take(id).unwrap().settle(Ok(()));
            handles.next().unwrap().wait().unwrap();
        }
    }
}
