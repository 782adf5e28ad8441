//! Job change notifications over PostgreSQL LISTEN/NOTIFY.
//!
//! Writers push job ids to a [`Notifier`], which coalesces them into one
//! `pg_notify` per few milliseconds (a NOTIFY inside every completion
//! transaction would serialize commits). Each process keeps ONE dedicated
//! LISTEN connection ([`ListenerHub`]) and fans notifications out to in-memory
//! [`JobWatch`]es. Protocol for waiters: subscribe, then read the row, then
//! wait; a wake-up between the read and the wait is not lost because a watch
//! remembers it. NOTIFY is not durable, so waiters also re-read periodically,
//! and every watch is woken when the listener (re)connects.
//!
//! The same channel announces committed events: [`EVENTS_RECORDED`] (the nil
//! id) wakes the schedulers' webhook delivery.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use diesel::sql_types::Text;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::PgPool;
use crate::prepared::PrepareOnce;
use unigen_core::batch::Batcher;

/// The id carried by [`Notifier::events_recorded`]: watch it to learn that
/// events (and so webhook deliveries) were committed. Job ids are UUIDv7,
/// never nil.
pub const EVENTS_RECORDED: Uuid = Uuid::nil();

pub use unigen_core::config::{AUTH_CHANNEL, validate_channel};

/// The id woken when [`AUTH_CHANNEL`] fires: watch it to drop cached keys.
/// Job ids are UUIDv7, never all ones.
pub const AUTH_CHANGED: Uuid = Uuid::max();

/// The auth channel's payload for one key (`api_keys:<id>`, sent by the
/// `api_keys` row trigger): only that key is dropped from the caches.
pub const KEY_CHANGED_PREFIX: &str = "api_keys:";

/// NOTIFY payloads must stay below 8000 bytes.
const MAX_PAYLOAD: usize = 7900;
const LISTENER_PING: Duration = Duration::from_secs(15);

/// Sends coalesced job-change notifications after commits.
#[derive(Clone)]
pub struct Notifier {
    batcher: Batcher<Uuid>,
}

impl Notifier {
    pub fn spawn(pool: PgPool, channel: String, window: Duration) -> (Self, JoinHandle<()>) {
        let (batcher, handle) = Batcher::spawn(window, 4096, move |mut ids: Vec<Uuid>| {
            // Many writers report the same events marker within one window.
            ids.sort_unstable();
            ids.dedup();
            let pool = pool.clone();
            let channel = channel.clone();
            async move {
                if let Err(err) = send_notifications(&pool, &channel, &ids).await {
                    // Waiters re-read periodically; a lost wake-up only delays them.
                    tracing::warn!(error = %err, jobs = ids.len(), "job notification failed");
                }
            }
        });
        (Self { batcher }, handle)
    }

    /// Call after the transaction that changed the job committed.
    pub fn job_changed(&self, id: Uuid) {
        self.batcher.push(id);
    }

    /// Call after a transaction that inserted events committed: wakes the
    /// schedulers' webhook delivery (coalesced with job notifications).
    pub fn events_recorded(&self) {
        self.batcher.push(EVENTS_RECORDED);
    }
}

/// For short-lived processes without a [`Notifier`] (operator commands):
/// wakes webhook delivery at once after a commit that recorded events.
pub async fn send_events_recorded(
    conn: &mut diesel_async::AsyncPgConnection,
    channel: &str,
) -> anyhow::Result<()> {
    use diesel_async::RunQueryDsl;
    diesel::sql_query("SELECT pg_notify($1, $2)")
        .bind::<Text, _>(channel)
        .bind::<Text, _>(EVENTS_RECORDED.to_string())
        .prepared()
        .execute(conn)
        .await?;
    Ok(())
}

async fn send_notifications(pool: &PgPool, channel: &str, ids: &[Uuid]) -> anyhow::Result<()> {
    use diesel_async::RunQueryDsl;
    let mut conn = pool.get().await?;
    for payload in payloads(ids) {
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<Text, _>(channel)
            .bind::<Text, _>(payload)
            .prepared()
            .execute(&mut conn)
            .await?;
    }
    Ok(())
}

/// Comma-separated ids, split so each payload stays under the NOTIFY limit.
fn payloads(ids: &[Uuid]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for id in ids {
        if current.len() + 37 > MAX_PAYLOAD {
            out.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(',');
        }
        current.push_str(&id.to_string());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[derive(Default)]
struct HubInner {
    watches: Mutex<HashMap<Uuid, watch::Sender<u64>>>,
    /// One API key changed (`api_keys:<id>` on the auth channel): its id,
    /// to whoever listens (the key caches, which drop only that key).
    key_changes: Mutex<Option<tokio::sync::broadcast::Sender<Uuid>>>,
    connected: AtomicBool,
    reconnects: AtomicU64,
}

impl HubInner {
    fn key_changed(&self, id: Uuid) {
        if let Some(sender) = self.key_changes.lock().expect("hub lock").as_ref() {
            // No receiver: nothing caches keys.
            let _ = sender.send(id);
        }
    }

    fn wake(&self, id: &Uuid) {
        if let Some(sender) = self.watches.lock().expect("hub lock").get(id) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    fn wake_all(&self) {
        for sender in self.watches.lock().expect("hub lock").values() {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// One LISTEN connection per process, shared by every waiter.
#[derive(Clone, Default)]
pub struct ListenerHub {
    inner: Arc<HubInner>,
}

/// A registration for one job's changes; dropping it unregisters.
pub struct JobWatch {
    id: Uuid,
    rx: Option<watch::Receiver<u64>>,
    hub: Arc<HubInner>,
}

impl JobWatch {
    /// Resolves once the job was reported changed since the watch was created
    /// or since the previous call returned.
    pub async fn changed(&mut self) {
        let rx = self.rx.as_mut().expect("receiver present until drop");
        if rx.changed().await.is_err() {
            // The sender lives as long as any watch for the id: unreachable,
            // but never spin if it happens.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for JobWatch {
    fn drop(&mut self) {
        self.rx.take();
        let mut watches = self.hub.watches.lock().expect("hub lock");
        if watches
            .get(&self.id)
            .is_some_and(|s| s.receiver_count() == 0)
        {
            watches.remove(&self.id);
        }
    }
}

impl ListenerHub {
    /// Starts the listener task (reconnecting with backoff until `shutdown`).
    pub fn spawn(
        database_url: String,
        channel: String,
        shutdown: CancellationToken,
    ) -> (Self, JoinHandle<()>) {
        let hub = Self::default();
        let inner = hub.inner.clone();
        let handle = tokio::spawn(async move {
            let mut backoff = reconnect_backoff();
            loop {
                let session = listen_session(&database_url, &channel, &inner, &shutdown);
                match session.await {
                    Ok(()) => break, // shutdown
                    Err(err) => {
                        inner.connected.store(false, Ordering::Relaxed);
                        // Waiters re-read now rather than at their next periodic check.
                        inner.wake_all();
                        let delay = backoff.next().unwrap_or(Duration::from_secs(5));
                        tracing::warn!(error = %err, retry_in_ms = delay.as_millis() as u64, "job listener disconnected");
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep(delay) => {}
                        }
                        inner.reconnects.fetch_add(1, Ordering::Relaxed);
                    }
                }
                backoff = reconnect_backoff();
            }
            inner.connected.store(false, Ordering::Relaxed);
        });
        (hub, handle)
    }

    pub fn subscribe(&self, id: Uuid) -> JobWatch {
        let mut watches = self.inner.watches.lock().expect("hub lock");
        let rx = watches
            .entry(id)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        JobWatch {
            id,
            rx: Some(rx),
            hub: self.inner.clone(),
        }
    }

    /// A hub that reports itself connected without a listener (unit tests
    /// of code that trusts notifications only while connected).
    #[doc(hidden)]
    pub fn connected_for_tests() -> Self {
        let hub = Self::default();
        hub.inner.connected.store(true, Ordering::Relaxed);
        hub
    }

    /// The ids of API keys changed from now on (revoked, expired, scopes,
    /// deleted). A receiver that lags behind must treat every key as changed.
    pub fn subscribe_key_changes(&self) -> tokio::sync::broadcast::Receiver<Uuid> {
        self.inner
            .key_changes
            .lock()
            .expect("hub lock")
            .get_or_insert_with(|| tokio::sync::broadcast::channel(1024).0)
            .subscribe()
    }

    /// Tells this process's subscribers that a key changed, as the auth
    /// channel's notification will (for a process that changed it itself).
    pub fn key_changed(&self, id: Uuid) {
        self.inner.key_changed(id);
    }

    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::Relaxed)
    }

    pub fn reconnects(&self) -> u64 {
        self.inner.reconnects.load(Ordering::Relaxed)
    }

    pub fn watch_count(&self) -> usize {
        self.inner.watches.lock().expect("hub lock").len()
    }
}

/// At most 5 s apart: jitter adds up to the delay again.
fn reconnect_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_millis(2_500))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Runs one LISTEN connection until it fails (Err) or shutdown (Ok).
async fn listen_session(
    database_url: &str,
    channel: &str,
    inner: &HubInner,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let mut config: tokio_postgres::Config = database_url.parse()?;
    config
        .connect_timeout(Duration::from_secs(5))
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(30))
        .application_name("unigen-listener");
    let (client, mut connection) = config.connect(NoTls).await?;
    // (is the auth channel, payload)
    let (tx, mut rx) = mpsc::unbounded_channel::<(bool, String)>();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let auth = n.channel() == AUTH_CHANNEL;
                    if tx.send((auth, n.payload().to_owned())).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!(error = %err, "listener connection ended");
                    break;
                }
            }
        }
    });
    let result = async {
        client
            .batch_execute(&format!("LISTEN \"{channel}\"; LISTEN {AUTH_CHANNEL}"))
            .await?;
        inner.connected.store(true, Ordering::Relaxed);
        // Anything that happened while we were not listening is re-read.
        inner.wake_all();
        tracing::info!(channel, "job listener connected");
        let mut ping = tokio::time::interval(LISTENER_PING);
        ping.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                payload = rx.recv() => match payload {
                    Some((true, payload)) => match payload
                        .strip_prefix(KEY_CHANGED_PREFIX)
                        .and_then(|id| id.parse::<Uuid>().ok())
                    {
                        // One key: only it is dropped from the caches.
                        Some(id) => inner.key_changed(id),
                        // An organization or a plan: everything cached.
                        None => inner.wake(&AUTH_CHANGED),
                    },
                    Some((false, payload)) => {
                        for id in payload.split(',').filter_map(|s| s.parse::<Uuid>().ok()) {
                            inner.wake(&id);
                        }
                    }
                    None => anyhow::bail!("listener connection closed"),
                },
                _ = ping.tick() => {
                    // Detects a silently dead connection (no traffic otherwise).
                    tokio::time::timeout(Duration::from_secs(5), client.simple_query("SELECT 1"))
                        .await
                        .map_err(|_| anyhow::anyhow!("listener ping timed out"))??;
                }
            }
        }
    }
    .await;
    driver.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_split_below_the_notify_limit_and_keep_every_id() {
        let ids: Vec<Uuid> = (0..500).map(|_| Uuid::new_v4()).collect();
        let payloads = payloads(&ids);
        assert!(payloads.len() > 1);
        assert!(payloads.iter().all(|p| p.len() < 8000));
        let parsed: Vec<Uuid> = payloads
            .iter()
            .flat_map(|p| p.split(','))
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(parsed, ids);
    }

    #[tokio::test]
    async fn a_wake_between_subscribe_and_wait_is_not_lost_and_drop_unregisters() {
        let hub = ListenerHub::default();
        let id = Uuid::new_v4();
        let mut first = hub.subscribe(id);
        let second = hub.subscribe(id);
        hub.inner.wake(&id);
        tokio::time::timeout(Duration::from_secs(1), first.changed())
            .await
            .unwrap();
        drop(second);
        assert_eq!(hub.watch_count(), 1);
        drop(first);
        assert_eq!(hub.watch_count(), 0);
    }

    #[test]
    fn channel_names_are_restricted() {
        assert!(validate_channel("unigen_jobs").is_ok());
        assert!(validate_channel("x\"; DROP").is_err());
        assert!(validate_channel("").is_err());
        assert!(validate_channel(AUTH_CHANNEL).is_err());
    }
}
