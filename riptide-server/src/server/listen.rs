//! The accept loop and the drain at shutdown that `riptide serve` and `riptide router` share.
//!
//! Invariants: the loop hands every accepted stream, with a connection id that counts from 1,
//! to its caller's closure, and ends when the stop signal changes; a failed accept (out of
//! descriptors and the like) is logged and retried after a pause, never fatal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// Accepts on `listener` until `stop` changes, handing each stream and its id to `on_accept`.
pub(crate) fn spawn_accept_loop(
    listener: TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut on_accept: impl FnMut(TcpStream, u32) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut next_id: u32 = 1;
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.changed() => break,
            };
            match accepted {
                Ok((stream, _)) => {
                    on_accept(stream, next_id);
                    next_id = next_id.wrapping_add(1).max(1);
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
}

/// Waits until no connection is open (`open` counts them), for at most `grace`.
pub(crate) async fn drain(open: &AtomicU64, grace: Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    while open.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
