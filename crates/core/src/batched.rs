//! Calls from many requests served by one task in batches: whatever has
//! arrived since the previous batch goes into the next one, so under light
//! load a batch is a single call and nothing waits for a window to fill,
//! while under load one statement (and one commit) serves many requests.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

type Call<I, O> = (I, oneshot::Sender<O>);

/// Sending half; cheap to clone.
pub struct Batched<I, O> {
    tx: mpsc::UnboundedSender<Call<I, O>>,
}

impl<I, O> Clone for Batched<I, O> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
        }
    }
}

impl<I: Send + 'static, O: Send + 'static> Batched<I, O> {
    /// `run` answers a batch in its order, or fails it as a whole: the
    /// failure is logged (as a batch of `what`) and every caller then does
    /// its call on its own. Up to `parallel` batches run at once; what
    /// arrives meanwhile waits for the next one.
    pub fn spawn<F, Fut, E>(
        what: &'static str,
        max: usize,
        parallel: usize,
        run: F,
    ) -> (Self, JoinHandle<()>)
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<Call<I, O>>();
        let run = Arc::new(run);
        let handle = tokio::spawn(async move {
            let permits = Arc::new(Semaphore::new(parallel.max(1)));
            while let Some(first) = rx.recv().await {
                let permit = permits.clone().acquire_owned().await.expect("never closed");
                let mut calls = vec![first];
                while calls.len() < max {
                    match rx.try_recv() {
                        Ok(call) => calls.push(call),
                        Err(_) => break,
                    }
                }
                let (items, replies): (Vec<I>, Vec<oneshot::Sender<O>>) = calls.into_iter().unzip();
                let batch = run(items);
                tokio::spawn(async move {
                    match batch.await {
                        Ok(answers) => {
                            for (reply, answer) in replies.into_iter().zip(answers) {
                                let _ = reply.send(answer);
                            }
                        }
                        // The replies are dropped: callers see `None`.
                        Err(err) => tracing::warn!(
                            error = %err,
                            calls = replies.len(),
                            "a batch of {what} failed; one by one instead"
                        ),
                    }
                    drop(permit);
                });
            }
        });
        (Self { tx }, handle)
    }

    /// The batch's answer for `item`; `None`: its batch failed (or the task
    /// stopped) and the caller must do the call itself.
    pub async fn call(&self, item: I) -> Option<O> {
        let (reply, answer) = oneshot::channel();
        self.tx.send((item, reply)).ok()?;
        answer.await.ok()
    }

    /// Puts `item` in the next batch without waiting for its answer (for
    /// `run`s that deal with failures themselves). `false`: the task ended.
    pub fn send(&self, item: I) -> bool {
        let (reply, _) = oneshot::channel();
        self.tx.send((item, reply)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn calls_arriving_together_share_a_batch_and_get_their_own_answers() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let (batched, _task) = Batched::spawn("tests", 100, 1, move |items: Vec<u32>| {
            seen.lock().unwrap().push(items.len());
            async move { Ok::<_, String>(items.into_iter().map(|i| i * 10).collect()) }
        });
        let answers = futures_util::future::join_all((0..50).map(|i| batched.call(i))).await;
        assert_eq!(answers, (0..50).map(|i| Some(i * 10)).collect::<Vec<_>>());
        let sizes = sizes.lock().unwrap();
        assert!(sizes.len() < 50, "batched: {sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 50);
    }

    #[tokio::test]
    async fn a_failed_batch_answers_none_so_callers_fall_back() {
        let (batched, _task) = Batched::spawn("tests", 10, 1, |_: Vec<u32>| async {
            Err::<Vec<u32>, _>("the batch failed")
        });
        assert_eq!(batched.call(1).await, None);
    }
}
