//! Coalesces items produced by many tasks into batches handled by one task:
//! one NOTIFY for many completions, one UPDATE for many publish confirms.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Sending half; cheap to clone. Items sent after the flusher stopped are dropped.
#[derive(Clone)]
pub struct Batcher<T> {
    tx: mpsc::UnboundedSender<T>,
}

impl<T: Send + 'static> Batcher<T> {
    /// Spawns the flusher: it waits for a first item, collects whatever else
    /// arrives within `window` (at most `max` items), and hands the batch to
    /// `flush`. With a zero window nothing waits: a batch is what has queued
    /// by then (under load, what arrived during the previous flush). It ends
    /// once every sender is dropped and the queue is drained.
    pub fn spawn<F, Fut>(window: Duration, max: usize, mut flush: F) -> (Self, JoinHandle<()>)
    where
        F: FnMut(Vec<T>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<T>();
        let handle = tokio::spawn(async move {
            let mut batch = Vec::with_capacity(max);
            while let Some(first) = rx.recv().await {
                batch.push(first);
                let deadline = tokio::time::Instant::now() + window;
                while batch.len() < max {
                    let next = if window.is_zero() {
                        // Not even a timer: one would wait for its next tick.
                        rx.try_recv().ok()
                    } else {
                        tokio::time::timeout_at(deadline, rx.recv())
                            .await
                            .ok()
                            .flatten()
                    };
                    match next {
                        Some(item) => batch.push(item),
                        None => break,
                    }
                }
                flush(std::mem::take(&mut batch)).await;
            }
        });
        (Self { tx }, handle)
    }

    pub fn push(&self, item: T) {
        let _ = self.tx.send(item);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn items_pushed_together_flush_as_one_batch_and_all_arrive() {
        let seen = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let sink = seen.clone();
        let (batcher, handle) = Batcher::spawn(Duration::from_millis(50), 100, move |batch| {
            let sink = sink.clone();
            async move { sink.lock().unwrap().push(batch) }
        });
        for i in 0..10 {
            batcher.push(i);
        }
        drop(batcher);
        handle.await.unwrap();
        let batches = seen.lock().unwrap();
        assert_eq!(batches.concat(), (0..10).collect::<Vec<_>>());
        assert_eq!(batches.len(), 1, "{batches:?}");
    }

    #[tokio::test]
    async fn batches_respect_the_maximum_size() {
        let seen = Arc::new(Mutex::new(Vec::<usize>::new()));
        let sink = seen.clone();
        let (batcher, handle) = Batcher::spawn(Duration::from_millis(50), 3, move |batch| {
            let sink = sink.clone();
            async move { sink.lock().unwrap().push(batch.len()) }
        });
        for i in 0..7 {
            batcher.push(i);
        }
        drop(batcher);
        handle.await.unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![3, 3, 1]);
    }

    #[tokio::test]
    async fn a_zero_window_flushes_what_has_queued_without_waiting() {
        let seen = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let sink = seen.clone();
        let (batcher, handle) = Batcher::spawn(Duration::ZERO, 100, move |batch| {
            let sink = sink.clone();
            async move { sink.lock().unwrap().push(batch) }
        });
        for i in 0..3 {
            batcher.push(i);
        }
        // The flusher runs only now (one thread): the three are queued.
        tokio::task::yield_now().await;
        batcher.push(3);
        drop(batcher);
        handle.await.unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![vec![0, 1, 2], vec![3]]);
    }
}
