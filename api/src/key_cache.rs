//! Verified keys cached for a few seconds, so an authenticated request does
//! not cost a database round trip for its key.
//!
//! Staleness is bounded twice: entries expire after `auth.key_cache_seconds`,
//! and every change to keys, organizations or plans (a trigger notifies
//! [`AUTH_CHANNEL`](unigen_db::notify::AUTH_CHANNEL)) reaches every
//! process's cache at once, so a revocation takes effect within
//! milliseconds. A key's change (revoked, expired, scopes) drops only that
//! key; an organization's or a plan's drops everything. While the listener
//! is disconnected, notifications may be missed: the cache is bypassed
//! until it is back.
//!
//! [`KeyUsage`] keeps `api_keys.last_used_at` roughly current without a
//! write per request: each key is recorded at most once per
//! [`USE_RESOLUTION`] per process, in batched updates off the request path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use unigen_core::batch::Batcher;
use unigen_db::models::KeyAuthRow;
use unigen_db::notify::{AUTH_CHANGED, ListenerHub};
use unigen_db::{DbError, PgPool, queries};
use uuid::Uuid;

/// `last_used_at` is at most this stale (per process).
pub const USE_RESOLUTION: Duration = Duration::from_secs(60);

/// Uses recorded within this window go to the database in one UPDATE.
const USE_FLUSH_WINDOW: Duration = Duration::from_millis(200);

/// Past this many entries the cache is emptied rather than grown (keys
/// guessed at random are never cached, only verified ones).
const MAX_ENTRIES: usize = 100_000;

struct Inner {
    ttl: Duration,
    entries: Mutex<HashMap<[u8; 32], (KeyAuthRow, Instant)>>,
    /// Bumped by every invalidation: a lookup that raced one is not stored.
    generation: AtomicU64,
    hub: ListenerHub,
}

#[derive(Clone)]
pub struct KeyCache {
    inner: Arc<Inner>,
    usage: Option<KeyUsage>,
}

/// Where a lookup started, to store its result only if nothing changed since.
pub struct Ticket(u64);

impl KeyCache {
    /// `ttl` zero disables the cache. The task empties it on every change.
    pub fn spawn(ttl: Duration, hub: ListenerHub) -> (Self, JoinHandle<()>) {
        let mut changes = hub.subscribe(AUTH_CHANGED);
        let mut key_changes = hub.subscribe_key_changes();
        let cache = Self {
            inner: Arc::new(Inner {
                ttl,
                entries: Mutex::new(HashMap::new()),
                generation: AtomicU64::new(0),
                hub,
            }),
            usage: None,
        };
        let invalidated = cache.clone();
        // Also woken when the listener reconnects: whatever was missed meanwhile is dropped.
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = changes.changed() => invalidated.clear(),
                    key = key_changes.recv() => match key {
                        Ok(key_id) => invalidated.evict(key_id),
                        // Missed some: any key may have changed.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            invalidated.clear();
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                            changes.changed().await;
                            invalidated.clear();
                        }
                    },
                }
            }
        });
        (cache, task)
    }

    /// Records each key's use (`last_used_at`) through `usage`.
    pub fn with_usage(mut self, usage: KeyUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// An authenticated request used this key.
    pub fn record_use(&self, key_id: Uuid) {
        if let Some(usage) = &self.usage {
            usage.record(key_id);
        }
    }

    fn usable(&self) -> bool {
        !self.inner.ttl.is_zero() && self.inner.hub.is_connected()
    }

    pub fn get(&self, hash: &[u8; 32]) -> Option<KeyAuthRow> {
        if !self.usable() {
            return None;
        }
        let entries = self.inner.entries.lock().expect("key cache lock");
        let (row, stored) = entries.get(hash)?;
        (stored.elapsed() < self.inner.ttl).then(|| row.clone())
    }

    /// Call before reading the key from the database.
    pub fn ticket(&self) -> Ticket {
        Ticket(self.inner.generation.load(Ordering::Acquire))
    }

    pub fn put(&self, hash: [u8; 32], row: KeyAuthRow, ticket: Ticket) {
        if !self.usable() {
            return;
        }
        let mut entries = self.inner.entries.lock().expect("key cache lock");
        // Checked under the lock that `clear` takes too.
        if self.inner.generation.load(Ordering::Acquire) != ticket.0 {
            return;
        }
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(hash, (row, Instant::now()));
    }

    /// Drops one key (revoked, or changed), in this process; every other
    /// process hears of it from the `api_keys` trigger's notification.
    pub fn evict(&self, key_id: Uuid) {
        let mut entries = self.inner.entries.lock().expect("key cache lock");
        // A lookup of this key that raced the change is not stored.
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        entries.retain(|_, (row, _)| row.key_id != key_id);
    }

    pub fn clear(&self) {
        let mut entries = self.inner.entries.lock().expect("key cache lock");
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }
}

/// Records when keys are used (see the module's documentation).
#[derive(Clone)]
pub struct KeyUsage {
    throttle: Arc<UseThrottle>,
    writes: Batcher<Uuid>,
}

impl KeyUsage {
    /// The task ends once every handle is dropped and the last batch is written.
    pub fn spawn(pool: PgPool) -> (Self, JoinHandle<()>) {
        let (writes, task) = Batcher::spawn(USE_FLUSH_WINDOW, 1024, move |mut ids: Vec<Uuid>| {
            ids.sort_unstable();
            ids.dedup();
            let pool = pool.clone();
            async move {
                let result = async {
                    let mut conn = pool.get().await.map_err(DbError::from)?;
                    queries::keys::touch_last_used(&mut conn, &ids).await
                }
                .await;
                if let Err(err) = result {
                    // Only the listing's `last_used_at` lags; nothing else depends on it.
                    tracing::warn!(error = %err, keys = ids.len(), "recording key use failed");
                }
            }
        });
        let usage = Self {
            throttle: Arc::new(UseThrottle::default()),
            writes,
        };
        (usage, task)
    }

    /// Called for every authenticated request; costs a map look-up unless
    /// the key's last recorded use is older than [`USE_RESOLUTION`].
    pub fn record(&self, key_id: Uuid) {
        if self.throttle.should_write(key_id, Instant::now()) {
            self.writes.push(key_id);
        }
    }
}

/// When this process last recorded each key's use.
#[derive(Default)]
struct UseThrottle {
    recorded: Mutex<HashMap<Uuid, Instant>>,
}

impl UseThrottle {
    fn should_write(&self, key_id: Uuid, now: Instant) -> bool {
        let mut recorded = self.recorded.lock().expect("key usage lock");
        if recorded
            .get(&key_id)
            .is_some_and(|at| now.saturating_duration_since(*at) < USE_RESOLUTION)
        {
            return false;
        }
        if recorded.len() >= MAX_ENTRIES {
            // Forgetting only costs one extra write per key.
            recorded.clear();
        }
        recorded.insert(key_id, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_use_is_written_at_most_once_per_resolution() {
        let throttle = UseThrottle::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let start = Instant::now();
        assert!(throttle.should_write(a, start));
        assert!(!throttle.should_write(a, start + Duration::from_secs(59)));
        assert!(throttle.should_write(b, start + Duration::from_secs(1)));
        assert!(throttle.should_write(a, start + USE_RESOLUTION));
        assert!(!throttle.should_write(a, start + USE_RESOLUTION));
    }

    fn row() -> KeyAuthRow {
        KeyAuthRow {
            key_id: Uuid::nil(),
            org_id: Uuid::nil(),
            scopes: vec!["all".into()],
            expires_at: None,
            revoked_at: None,
            org_status: "active".into(),
            plan_code: "free".into(),
            rate_limit_per_minute: 60,
            concurrent_requests: 1,
        }
    }

    #[tokio::test]
    async fn nothing_is_cached_while_the_listener_is_down() {
        // A hub that never connected: invalidations could be missed.
        let (cache, _task) = KeyCache::spawn(Duration::from_secs(60), ListenerHub::default());
        let ticket = cache.ticket();
        cache.put([1; 32], row(), ticket);
        assert!(cache.get(&[1; 32]).is_none());
    }

    #[tokio::test]
    async fn a_lookup_that_raced_an_invalidation_is_not_stored() {
        let hub = ListenerHub::connected_for_tests();
        let (cache, _task) = KeyCache::spawn(Duration::from_secs(60), hub);
        let stale = cache.ticket();
        cache.clear();
        cache.put([1; 32], row(), stale);
        assert!(cache.get(&[1; 32]).is_none());
        let fresh = cache.ticket();
        cache.put([1; 32], row(), fresh);
        assert_eq!(cache.get(&[1; 32]).unwrap().plan_code, "free");
    }

    #[tokio::test]
    async fn a_key_change_drops_only_that_key() {
        let hub = ListenerHub::connected_for_tests();
        let (cache, _task) = KeyCache::spawn(Duration::from_secs(60), hub.clone());
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let ticket = cache.ticket();
        cache.put([1; 32], KeyAuthRow { key_id: a, ..row() }, ticket);
        let ticket = cache.ticket();
        cache.put([2; 32], KeyAuthRow { key_id: b, ..row() }, ticket);
        // As the auth channel's `api_keys:<a>` notification does.
        hub.key_changed(a);
        for _ in 0..100 {
            if cache.get(&[1; 32]).is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(cache.get(&[1; 32]).is_none(), "the changed key is dropped");
        assert_eq!(cache.get(&[2; 32]).unwrap().key_id, b, "the other stays");
    }

    #[tokio::test]
    async fn entries_expire_and_a_zero_ttl_disables_the_cache() {
        let hub = ListenerHub::connected_for_tests();
        let (cache, _task) = KeyCache::spawn(Duration::from_millis(30), hub.clone());
        let ticket = cache.ticket();
        cache.put([2; 32], row(), ticket);
        assert!(cache.get(&[2; 32]).is_some());
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(cache.get(&[2; 32]).is_none());

        let (off, _task) = KeyCache::spawn(Duration::ZERO, hub);
        let ticket = off.ticket();
        off.put([3; 32], row(), ticket);
        assert!(off.get(&[3; 32]).is_none());
    }
}
