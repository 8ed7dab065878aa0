//! The write path: batches, the write stall, write task queues, the four-stage pipeline and
//! async commit.

pub(crate) mod batch;
pub(crate) mod completion;
pub(crate) mod pipeline;
pub(crate) mod stall;
